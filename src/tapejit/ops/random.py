"""Counter-based random bits: the counter (`iota`) and the Threefry-2x32 block (`threefry2x32`).

tj.random (random.py) draws every number from `threefry2x32(k0, k1, c0, c1)`: the 20-round
Threefry-2x32 hash (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011; the
generator of JAX and Random123) of a key (k0, k1) and a counter (c0, c1), uint32 words, per
element. A draw's counter is its element's position (`iota`), so each element is computed on
its own: in a loop nest, on a GPU thread, in any order, with the same result.

`block` is the hash, written once: the interpreter (and the CUDA simulator) runs it on numpy
arrays of int64 words; codegen/threefry.py runs the same function on LLVM values to emit the
straight-line code that compiled CPU loops and CUDA kernels inline (`tj_threefry.bits32`,
`tjm.threefry_bits32`, ...), so every backend computes the same bits by construction.
"""
from __future__ import annotations

import math

import numpy as np

from ..avals import DTYPES_BY_NAME, Aval
from ..errors import DtypeError
from . import Kind, View, defop, zero_vjp
from .elementwise import _shape_rule
from .layout import no_operands

MASK = 0xFFFFFFFF
PARITY = 0x1BD11BDA                                  # Threefry's key-schedule constant
ROTATIONS = (13, 15, 26, 6, 17, 29, 16, 24)          # round 4i + j rotates by [4 (i % 2) + j]
CPU_GLOBAL = "tj_threefry"   # generated CPU modules read codegen/threefry.py by this name
U32 = np.dtype(np.uint32)


def block(k0, k1, c0, c1):
    """Threefry-2x32, 20 rounds: the words (x0, x1) for key (k0, k1) and counter (c0, c1).
    Written with +, ^, <<, >>, | and `& MASK` only, on words that are int64 numpy values in
    [0, 2^32) here and LLVM i32 values in codegen/threefry.py."""
    keys = (k0, k1, k0 ^ k1 ^ PARITY)
    x0, x1 = (c0 + k0) & MASK, (c1 + k1) & MASK
    for i in range(5):
        for j in range(4):
            r = ROTATIONS[4 * (i % 2) + j]
            x0 = (x0 + x1) & MASK
            x1 = (((x1 << r) | (x1 >> (32 - r))) & MASK) ^ x0
        x0 = (x0 + keys[(i + 1) % 3]) & MASK                   # key injection i + 1
        x1 = (x1 + keys[(i + 2) % 3] + i + 1) & MASK
    return x0, x1


def _words(*values):
    return block(*(np.asarray(v, np.int64) for v in values))


def bits32(k0, k1, c0, c1):
    """32 random bits: x0 ^ x1 (as JAX draws 32-bit values), on numpy arrays or numbers."""
    x0, x1 = _words(k0, k1, c0, c1)
    return np.uint32(x0 ^ x1)


def bits64(k0, k1, c0, c1):
    """64 random bits: x0 * 2^32 + x1 (as JAX draws 64-bit values and splits keys)."""
    x0, x1 = _words(k0, k1, c0, c1)
    return (np.uint64(x0) << np.uint64(32)) | np.uint64(x1)


_WORDS = _shape_rule("threefry2x32", "same", 4)


def _threefry_shape(*avals: Aval, bits: int) -> Aval:
    out = _WORDS(*avals)
    if out.dtype != U32 or bits not in (32, 64):
        raise DtypeError(f"threefry2x32: key and counter words must be uint32 and bits 32 or "
                         f"64, got {', '.join(str(a) for a in avals)} and bits={bits}")
    return Aval(out.shape, np.dtype(np.uint32 if bits == 32 else np.uint64))


def _threefry_impl(k0, k1, c0, c1, *, bits: int):
    return np.asarray((bits32 if bits == 32 else bits64)(k0, k1, c0, c1))


# random bits of each element's counter; integer results: no gradient
threefry2x32 = defop(
    "threefry2x32", Kind.ELEMENTWISE, _threefry_impl, shape=_threefry_shape, vjp=zero_vjp,
    scalar=lambda eqn: f"{CPU_GLOBAL}.bits{eqn.kw['bits']}({{0}}, {{1}}, {{2}}, {{3}})",
    cuda_scalar=lambda eqn: f"tjm.threefry_bits{eqn.kw['bits']}({{0}}, {{1}}, {{2}}, {{3}})")


def _iota_view(eqn, read, sizes, idx):
    """An element's row-major position, from the loop indices and the run-time sizes."""
    flat = "0"
    for d, n in enumerate(sizes.of(eqn.outs[0])):
        flat = idx[d] if flat == "0" else f"({flat}) * {sizes(n)} + {idx[d]}"
    return f"np.{eqn.outs[0].aval.dtype.name}({flat})"


# 0, 1, 2, ... in row-major order: the counters of a draw (no operands: it reads no array)
iota = defop("iota", Kind.LAYOUT,
             lambda *, shape, dtype: np.arange(math.prod(shape), dtype=DTYPES_BY_NAME[dtype])
             .reshape(shape),
             shape=lambda *, shape, dtype: Aval(tuple(shape), DTYPES_BY_NAME[dtype]),
             vjp=zero_vjp, view=View(_iota_view), batch=no_operands)
