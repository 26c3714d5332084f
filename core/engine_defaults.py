"""The engine's defaults, defined once: the settings (`VOXCAST_ENGINE_*`), the engine's config and the runner's read
them here. Plain numbers, importable by every layer (core imports nothing above it).

The GPU values a simulated H200 sweep chose, or a real device confirms, are set here too when they change.
"""

from __future__ import annotations

ENGINE_SLOTS = 16  # rows: requests in one step at once
KV_BLOCK_TOKENS = 16  # tokens per K/V block
MAX_CUDA_GRAPHS = 64  # decode-step CUDA graphs held at once (warm-up captures at most this many)
