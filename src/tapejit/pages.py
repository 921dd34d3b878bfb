"""A new program's large work arrays get their memory on a thread of their own.

`np.empty` maps memory that the kernel hands over page by page, on the first write: a program
whose temporaries hold 50 MB (bench/peers.py's GMM gradient) paid 3,000-12,000 page faults, a
third of its first run (28 ms against 17), in its first call. `prefault(arrays)` asks the
kernel to map them now (Linux 5.14's `madvise(MADV_POPULATE_WRITE)`, which changes no data)
on a daemon thread, while the program is still being loaded and bound; elsewhere it does
nothing. They are mapped in small pages (`MADV_NOHUGEPAGE`): numpy asks for huge pages for
arrays from 4 MiB, and mapping those could wait for the kernel to compact memory, holding the
process's memory map (the GMM gradient's first call took 310-610 ms, and 310-330 ms without;
its calls after it are as fast either way).
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Sequence

import numpy as np

LARGE = 1 << 18                 # bytes of an array worth it
_NOHUGEPAGE, _POPULATE_WRITE = 15, 23       # <linux/mman.h>
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_madvise = None
if sys.platform.startswith("linux"):
    try:
        _madvise = ctypes.CDLL(None, use_errno=True).madvise
        _madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _madvise.restype = ctypes.c_int
    except (OSError, AttributeError):
        _madvise = None


def _advise(arrays: Sequence[np.ndarray], advice: int) -> bool:
    if _madvise is None:
        return False
    starts = [a.ctypes.data // _PAGE * _PAGE for a in arrays]
    return all([_madvise(start, a.ctypes.data + a.nbytes - start, advice) == 0
                for start, a in zip(starts, arrays)])


def populate(arrays: Sequence[np.ndarray]) -> bool:
    """Map the memory of `arrays` now (ctypes releases the GIL meanwhile); whether the kernel
    could."""
    return _advise(arrays, _POPULATE_WRITE)


def prefault(arrays: Sequence[np.ndarray]) -> None:
    """The arrays of at least LARGE bytes in small pages, `populate`d on a daemon thread
    (which holds them)."""
    large = [a for a in arrays if a.nbytes >= LARGE]
    if large and _advise(large, _NOHUGEPAGE):
        threading.Thread(target=populate, args=(large,), name="tapejit-prefault",
                         daemon=True).start()
