#!/usr/bin/env bash
# The GPU benchmark: the one script to run on a GPU machine, which is offline.
#
#     bench/gpu.sh OUT_DIR
#
# Installs nothing from the network: where transformers 5.23 or soundfile is missing, the wheels in bench/wheels/
# (bench/fetch_wheels.sh fetches them beforehand, elsewhere);
# runs bench/gpu_checks.py (CUDA graphs against the eager step; packed prefill against each prompt alone; bf16
# against fp32), then bench/engine.py at
# VibeVoice-1.5B's shapes with random weights, bf16: transformers' generate() and the engine at concurrency 1, 16,
# 64 and 256 (offline), 64 requests arriving as a Poisson process (streaming policy), and the long-form run:
# one 60,000-token generation (a long script's prompt, then 600 frames) beside 63 short ones arriving over time,
# with the paged K/V pool's peak against the slot design's reservation; VibeVoice-Large (bench/engine.py --size 7b:
# Qwen2.5-7B's shapes, 32K context, random bf16 weights) at VOXCAST_BENCH_LARGE requests at once, on a GPU with room
# for its 18 GB (engine.py refuses one without, saying so); then the device's cost file
# (bench/gpu_costs.py: OUT_DIR/costs/costs.json, the form of shared/device_costs/) with the simulated device checked
# against the real engine on it (OUT_DIR/costs/validation.json, OUT_DIR/costs/simulated.json). Each engine gets
# ready as a worker's does (warm_up.prepare_to_serve: graphs captured, the fast path checked against the eager step, a fall-back with its
# reason where it fails), and the table says per run the step it decoded with, the K/V entries read per entry
# visible, the graphs, their memory and the warm-up time, and the pool sized beside the measured step. Every run writes
# OUT_DIR/NAME.json; the whole log is OUT_DIR/gpu.log and the table OUT_DIR/table.md. It keeps to a time
# budget (VOXCAST_BENCH_BUDGET_S, default 450 s): a run that would start past it is skipped and logged.
#
# The same script runs small on the CPU, to check it end to end anywhere:
#     VOXCAST_BENCH_SIZE=tiny VOXCAST_BENCH_DEVICE=cpu VOXCAST_BENCH_CONCURRENCY="1 2" \
#     VOXCAST_BENCH_AUDIO_SECONDS=1,2 VOXCAST_BENCH_STREAMING=2 VOXCAST_BENCH_ABLATION=2 \
#     VOXCAST_BENCH_LONGFORM="1500 40 3" VOXCAST_BENCH_COST_BATCHES=1,2 bench/gpu.sh out/
set -uo pipefail

out="${1:?usage: bench/gpu.sh OUT_DIR}"
size="${VOXCAST_BENCH_SIZE:-1.5b}"
device="${VOXCAST_BENCH_DEVICE:-cuda}"
concurrencies="${VOXCAST_BENCH_CONCURRENCY:-1 16 64 256}"
streaming="${VOXCAST_BENCH_STREAMING:-64}"
ablation="${VOXCAST_BENCH_ABLATION:-64}"
seconds="${VOXCAST_BENCH_AUDIO_SECONDS:-20,20}"
steps="${VOXCAST_BENCH_DIFFUSION_STEPS:-10}"
budget="${VOXCAST_BENCH_BUDGET_S:-450}"
read -r long_tokens long_frames long_beside <<<"${VOXCAST_BENCH_LONGFORM:-60000 600 63}"
if [ "$device" = cuda ]; then default_batches=1,4,16,64,128,256; else default_batches=1,2; fi
cost_batches="${VOXCAST_BENCH_COST_BATCHES:-$default_batches}"
large="${VOXCAST_BENCH_LARGE-16}"  # VibeVoice-Large's requests at once; set empty: no Large run
predicted_costs="${VOXCAST_BENCH_PREDICTED_COSTS:-../shared/device_costs/h200-vibevoice-1.5b-bf16-eager.json}"
python="${PYTHON:-python3}"

mkdir -p "$out" && out="$(cd "$out" && pwd)"
cd "$(dirname "$0")/.." || exit 1
log="$out/gpu.log"
: >"$log"
export PYTHONUNBUFFERED=1

has_packages() {
    "$python" -c "import soundfile, transformers, packaging.version as v
assert v.Version(transformers.__version__) >= v.Version('5.23')" 2>/dev/null
}
if ! has_packages && compgen -G "bench/wheels/*.whl" >/dev/null; then
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/voxcast-site bench/wheels/*.whl || exit 1
    export PYTHONPATH="/tmp/voxcast-site${PYTHONPATH:+:$PYTHONPATH}"
fi

say() { echo "$*" | tee -a "$log"; }

bench() {
    local name=$1 estimate=$2
    shift 2
    if ((SECONDS + estimate > budget)); then
        say "## $name: skipped, ${SECONDS}s spent of a ${budget}s budget"
        return
    fi
    say "## $name: bench/engine.py $*"
    "$python" bench/engine.py --size "$size" --device "$device" --diffusion-steps "$steps" \
        --audio-seconds "$seconds" --json "$out/$name.json" "$@" 2>&1 | grep -v 'Loading weights' | tee -a "$log"
}

say "# $(date -u +%FT%TZ) size=$size device=$device"
if [ "$device" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a "$log"
    "$python" bench/gpu_checks.py --json "$out/checks.json" 2>&1 | grep -v 'Loading weights' | tee -a "$log"
fi

for concurrency in $concurrencies; do
    if [ "$concurrency" = 1 ]; then
        bench "offline-c1" 60 --concurrency 1 --arrivals at-once --paths hf_sequential,engine
    else
        bench "offline-c$concurrency" $((30 + concurrency / 4)) --concurrency "$concurrency" --arrivals at-once \
            --paths hf_static,engine
    fi
done
bench "streaming-c$streaming" 70 --concurrency "$streaming" --arrivals poisson --rate 16 --paths hf_static,engine
bench "longform" 90 --workload longform --long-tokens "$long_tokens" --long-frames "$long_frames" \
    --concurrency "$long_beside" --rate 16 --paths engine
# The 7B member on the GPU only: a CPU holds its weights slowly if at all. `--size 7b` after bench's own `--size`
# wins (argparse keeps the last).
if [ -n "$large" ] && [ "$device" = cuda ]; then
    bench "large-c$large" 90 --size 7b --concurrency "$large" --arrivals at-once --paths hf_static,engine
fi
# The device's cost file (the form of shared/device_costs/), and the simulated device checked against this device:
# a Poisson workload through the real engine, the simulation with the file just measured, and the simulation with
# the shared H200 file (what was predicted before any GPU run); then the sweep's figures recalibrated on it.
if ((SECONDS + 150 <= budget)); then
    say "## costs: bench/gpu_costs.py --batches $cost_batches"
    predicted=()
    [ -f "$predicted_costs" ] && predicted=(--predicted-by "$predicted_costs")
    "$python" bench/gpu_costs.py --size "$size" --device "$device" --batches "$cost_batches" \
        --diffusion-steps "$steps" --out "$out/costs/costs.json" --validate "$out/costs/validation.json" \
        --validate-streams "$streaming" --validate-rate 2 --validate-seconds "$seconds" --validate-repeats 1 \
        "${predicted[@]}" 2>&1 |
        grep -v 'Loading weights' | tee -a "$log"
    "$python" bench/simulate.py --costs "$out/costs/costs.json" --streams "$streaming" --duration 90 \
        --validation "$out/costs/validation.json" --json "$out/costs/simulated.json" 2>&1 | tee -a "$log"
else
    say "## costs: skipped, ${SECONDS}s spent of a ${budget}s budget"
fi
# What each part of the fast path is worth: the engine at 64 requests without overlap, without graphs, eager.
bench "engine-c$ablation-no-overlap" 25 --concurrency "$ablation" --arrivals at-once --paths engine --no-overlap
bench "engine-c$ablation-no-graphs" 40 --concurrency "$ablation" --arrivals at-once --paths engine --no-cuda-graphs
bench "engine-c$ablation-eager" 60 --concurrency "$ablation" --arrivals at-once --paths engine --fixed-shapes off

"$python" bench/gpu_report.py "$out" | tee "$out/table.md" | tee -a "$log"
say "# done in ${SECONDS}s"
