"""The C allocator and pandas' string storage, set for how an analysis uses memory.

Each window allocates and frees arrays of megabytes by the hundred (the ledger's segment
columns, the joined frames, the metrics' subsets). By default glibc's malloc serves a
block that large with a fresh mmap (above a threshold that starts at 128 KiB) and hands
the memory back on free, and trims the heap once 128 KiB lie free at its top: the next
window then faults the same memory in again, page by page, and the kernel zeroes it.
Keeping freed memory for reuse took the 1M-kernel capture's analysis from 3.34 to 3.18 s
(median of 6 paired runs; minor page faults 147,000 -> 77,000, system time 0.44 -> 0.28 s)
at the same peak RSS; a process keeps its peak until it exits, which an analysis does
anyway.
"""

from __future__ import annotations

import ctypes
import sys

# mallopt's parameters (glibc's malloc.h).
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3

# Blocks up to this size come from the heap (glibc's largest allowed value on 64 bits).
MMAP_THRESHOLD = 32 * 2**20
# The heap is trimmed only when this much lies free at its top.
TRIM_THRESHOLD = 2**30
# The heap grows by this much more than asked for, in fewer system calls.
TOP_PAD = 64 * 2**20


def keep_freed_memory() -> None:
    """Ask glibc's malloc to keep freed memory for reuse (module docstring). Does nothing
    where the C library has no mallopt (macOS, Windows); harmless to call again."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    for parameter, value in (
        (_M_MMAP_THRESHOLD, MMAP_THRESHOLD),
        (_M_TRIM_THRESHOLD, TRIM_THRESHOLD),
        (_M_TOP_PAD, TOP_PAD),
    ):
        mallopt(parameter, value)


def python_string_storage() -> None:
    """Keep pandas' str columns and labels as Python objects, not Arrow arrays.

    With pyarrow installed (the `fast` extra), pandas 3 backs its str dtype with Arrow, and
    every frame the windows build pays for it: its column labels are an Arrow-backed Index
    (a DataFrame built in 51 against 42 us, a column looked up in 7.0 against 5.2 us, an
    assign 45 against 25 us). Values and outputs are the same either way; the 1M-kernel
    capture's analysis took 0.948x the time (median of 8 paired runs). The setting is the
    process's, as keep_freed_memory's is; harmless to call again.
    """
    import pandas as pd

    pd.set_option("mode.string_storage", "python")
