"""The process's C allocator, set for tensor work on the CPU: freed blocks are kept for the next allocation.

glibc hands every block above its mmap threshold (128 KiB at first, raised to at most 32 MiB as blocks are freed)
to the kernel on `free` and trims the heap's free top past twice that; the next block of the size is fresh pages,
each one faulted in and zeroed by the kernel. A request's start on the CPU (its voices through the acoustic and
semantic encoders) allocates and frees about 150 MiB of activations this way: with glibc's defaults about 40,000 page
faults per two-voice start of the tiny model, 60 to 70% of its time in the kernel (120 to 160 ms; 60 to 95 without), and
a cost that moves with the kernel's state rather than with the work. PyTorch's CPU performance guide recommends an
allocator that keeps memory (jemalloc, tcmalloc) for the same reason; glibc's own `mallopt` does it without a
preloaded library: the mmap threshold fixed at its ceiling (which also ends its moving) and the trim threshold above
what a step frees.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameters (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 32 * 2**20  # glibc's ceiling for it on a 64-bit system: blocks above it are still mapped
TRIM_THRESHOLD_BYTES = 2**30  # free memory kept at the heap's top before it goes back to the kernel


@functools.cache
def keep_freed_memory() -> bool:
    """Make this process's glibc keep freed blocks for reuse (once per process); False where the C library is not
    glibc or refuses the setting, which leaves its defaults: slower tensor work on the CPU, nothing wrong."""
    mallopt = _glibc_call("mallopt")
    if mallopt is None:
        return False
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)):
        logger.info("C allocator left as it is", extra={"reason": "mallopt refused the thresholds"})
        return False
    return True


def release_freed_memory() -> None:
    """Hand the kept free memory back to the kernel now (glibc's malloc_trim): before a measure of peak RSS, so
    that a path is not charged with what an earlier one freed and the process kept."""
    trim = _glibc_call("malloc_trim")
    if trim is not None:
        trim(0)


@functools.cache
def _glibc_call(name: str) -> Callable[..., int] | None:
    """The C library's function `name` taking ints, or None (logged) where it has none. Looked up among the
    process's own symbols (`CDLL(None)`), where the C library it runs on is: no search, no subprocess."""
    try:
        call = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        logger.info("C allocator left as it is", extra={"reason": f"no {name} in this process's C library"})
        return None
    call.argtypes = (ctypes.c_int, ctypes.c_int) if name == "mallopt" else (ctypes.c_size_t,)
    return call
