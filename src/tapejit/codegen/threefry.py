"""Threefry-2x32 in compiled code: ops/random.py's `block`, run on LLVM i32 values, as numba
intrinsics that inline its 20 rounds as straight-line integer code at each call.

`bits32(k0, k1, c0, c1)` (uint32: x0 ^ x1) and `bits64` (uint64: x0 * 2^32 + x1) take four
integer words. The same intrinsics compile in CPU functions, where the loops around them
vectorise, and in CUDA kernels (as `tjm.threefry_bits32`, ...; cuda_math.py), where a
rotation is one funnel shift; neither compiles a function of its own, so kernels compile to
PTX without a GPU. Generated CPU modules read this module as the global `tj_threefry`
(ops.random.CPU_GLOBAL), which scalar.py registers.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

from ..ops.random import MASK, block

_I32, _I64 = ir.IntType(32), ir.IntType(64)


class _Word:
    """An LLVM i32 value under the operators `block` uses; i32 arithmetic wraps, so its
    `& MASK` is the value itself."""

    def __init__(self, builder: ir.IRBuilder, value: ir.Value) -> None:
        self.builder, self.value = builder, value

    def _of(self, other: Any) -> ir.Value:
        return other.value if isinstance(other, _Word) else ir.Constant(_I32, other & MASK)

    def _apply(self, op: str, other: Any) -> "_Word":
        return _Word(self.builder, getattr(self.builder, op)(self.value, self._of(other)))

    def __add__(self, other: Any) -> "_Word":
        return self._apply("add", other)

    def __xor__(self, other: Any) -> "_Word":
        return self._apply("xor", other)

    def __or__(self, other: Any) -> "_Word":
        return self._apply("or_", other)

    def __lshift__(self, other: int) -> "_Word":
        return self._apply("shl", other)

    def __rshift__(self, other: int) -> "_Word":
        return self._apply("lshr", other)

    def __and__(self, other: int) -> "_Word":
        assert other == MASK
        return self


def _block(context: Any, builder: ir.IRBuilder, sig: Any, args: Any) -> tuple[ir.Value, ...]:
    """The words x0, x1 of `block` on the call's arguments (as uint32)."""
    words = [_Word(builder, context.cast(builder, a, t, types.uint32))
             for a, t in zip(args, sig.args)]
    return tuple(w.value for w in block(*words))


def _typer(result: types.Integer):
    def typer(typingctx: Any, k0: Any, k1: Any, c0: Any, c1: Any) -> Any:
        if all(isinstance(t, types.Integer) for t in (k0, k1, c0, c1)):
            return result(k0, k1, c0, c1)
        return None
    return typer


@intrinsic
def bits32(typingctx, k0, k1, c0, c1):
    """x0 ^ x1 of Threefry-2x32 for key (k0, k1) and counter (c0, c1): uint32."""
    def codegen(context, builder, sig, args):
        x0, x1 = _block(context, builder, sig, args)
        return builder.xor(x0, x1)
    return _typer(types.uint32)(typingctx, k0, k1, c0, c1), codegen


@intrinsic
def bits64(typingctx, k0, k1, c0, c1):
    """x0 * 2^32 + x1 of Threefry-2x32 for key (k0, k1) and counter (c0, c1): uint64."""
    def codegen(context, builder, sig, args):
        x0, x1 = _block(context, builder, sig, args)
        high = builder.shl(builder.zext(x0, _I64), ir.Constant(_I64, 32))
        return builder.or_(high, builder.zext(x1, _I64))
    return _typer(types.uint64)(typingctx, k0, k1, c0, c1), codegen
