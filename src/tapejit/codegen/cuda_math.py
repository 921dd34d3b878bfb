"""The float functions CUDA kernels call where the CPU template (scalar.py) calls a numpy ufunc
kernels cannot call (np.floor, np.ceil, np.trunc, np.rint, np.cbrt), Threefry's random
bits (`threefry_bits32`, `threefry_bits64`: codegen/threefry.py's intrinsics, inlined code),
and the special functions (erfinv: libdevice's; digamma, polygamma, ndtr, log_ndtr:
codegen/special.py's numba functions, gammainc, gammaincc, betainc, stdtr: special_incomplete.py's,
which numba-cuda compiles for the device as it compiles a kernel calling them; the simulator
calls them on the host).

Generated CUDA modules import this module as `tjm`. On a GPU these are libdevice's (the `f`
names take float32); the CUDA simulator runs kernels as Python and has no libdevice, so there
they are numpy's own ufuncs, and the random bits ops/random.py's numpy form. (Device functions
of our own would need a GPU driver to compile even to PTX: numba compiles them for the current
device; intrinsics do not.)
"""
from __future__ import annotations

import numpy as np
from numba import config

from ..ops import random as _random
from .special import digamma, erfinv as _erfinv, log_ndtr, ndtr, polygamma  # noqa: F401
from .special_incomplete import betainc, gammainc, gammaincc, stdtr  # noqa: F401

if config.ENABLE_CUDASIM:
    threefry_bits32, threefry_bits64 = _random.bits32, _random.bits64
    floor = floorf = np.floor
    ceil = ceilf = np.ceil
    trunc = truncf = np.trunc
    rint = rintf = np.rint
    cbrt = cbrtf = np.cbrt
    erfinv = erfinvf = _erfinv
else:
    from numba.cuda import libdevice

    from .threefry import bits32 as threefry_bits32, bits64 as threefry_bits64  # noqa: F401
    floor, floorf = libdevice.floor, libdevice.floorf
    ceil, ceilf = libdevice.ceil, libdevice.ceilf
    trunc, truncf = libdevice.trunc, libdevice.truncf
    rint, rintf = libdevice.rint, libdevice.rintf
    cbrt, cbrtf = libdevice.cbrt, libdevice.cbrtf
    erfinv, erfinvf = libdevice.erfinv, libdevice.erfinvf

