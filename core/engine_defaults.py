"""The engine's defaults, defined once: the settings (`VOXCAST_ENGINE_*`), the engine's config and the runner's read
them here. Plain numbers, importable by every layer (core imports nothing above it).

The GPU values a simulated H200 sweep chose, or a real device confirms, are set here too when they change.
"""

from __future__ import annotations

ENGINE_SLOTS = 16  # rows: requests in one step at once (on the CPU, where each row adds to a step's time)
# Rows on a GPU, where a step costs about the same for 1 or 256 rows: the simulated H200 sweep's choice (bench/README:
# 128 Poisson streams meet the SLO with about 100 rows busy); `bench/gpu.sh` confirms or corrects it on a device.
GPU_ENGINE_SLOTS = 256
KV_BLOCK_TOKENS = 16  # tokens per K/V block
MAX_CUDA_GRAPHS = 64  # decode-step CUDA graphs held at once (warm-up captures at most this many)


def default_slots(device_type: str) -> int:
    """The engine's rows where the settings leave them open: `GPU_ENGINE_SLOTS` on a GPU, `ENGINE_SLOTS` on the CPU."""
    return GPU_ENGINE_SLOTS if device_type == "cuda" else ENGINE_SLOTS
