#!/usr/bin/env bash
# Fetch, on a machine that reaches a package index, the wheels bench/gpu.sh installs on the offline GPU
# machine: what voxcast needs there beyond that machine's own packages (Python 3.12, torch 2.11,
# torchaudio 2.11, transformers 5.17, huggingface_hub, tokenizers, safetensors, numpy, psutil).
# They land in bench/wheels/ (git-ignored), which travels with the checkout.
set -euo pipefail
cd "$(dirname "$0")"
rm -rf wheels
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d wheels transformers==5.23.0 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12
ls -1 wheels
