"""The float functions CUDA kernels call where the CPU template (scalar.py) calls a numpy ufunc
kernels cannot call (np.floor, np.ceil, np.trunc, np.rint, np.cbrt).

Generated CUDA modules import this module as `tjm`. On a GPU these are libdevice's (the `f`
names take float32); the CUDA simulator runs kernels as Python and has no libdevice, so there
they are numpy's own ufuncs. (Device functions of our own would need a GPU driver to compile
even to PTX: numba compiles them for the current device.)
"""
from __future__ import annotations

import numpy as np
from numba import config

if config.ENABLE_CUDASIM:
    floor = floorf = np.floor
    ceil = ceilf = np.ceil
    trunc = truncf = np.trunc
    rint = rintf = np.rint
    cbrt = cbrtf = np.cbrt
else:
    from numba.cuda import libdevice
    floor, floorf = libdevice.floor, libdevice.floorf
    ceil, ceilf = libdevice.ceil, libdevice.ceilf
    trunc, truncf = libdevice.trunc, libdevice.truncf
    rint, rintf = libdevice.rint, libdevice.rintf
    cbrt, cbrtf = libdevice.cbrt, libdevice.cbrtf

