"""Matrix products for generated code: one small cached function shared by every program.

numba compiles its `np.dot` implementation again for each combination of operand layouts a
function uses (C @ C, C.T @ C, C @ C.T: about 0.17 s each, measured), in every program's
first compile. Generated code calls `tj_blas.matmul(a, b, out, ta, tb)` instead, with
C-contiguous operands and flags saying which to transpose. It calls the BLAS `gemm` numba
itself uses (`numba_xxgemm`, scipy's BLAS) directly, with the transposes as BLAS flags, and is
compiled once per dtype into numba's cache, like the vmath kernels: a new program only types a
call to it. Generated code reads this module as `tj_blas` (`calls.Kit.matmul`).

A large product runs on numba's threads, the ones tapejit's parallel loops use: `parts` cuts
the longer side of the result into blocks, and each thread computes one block with a
single-threaded BLAS call (threads.py keeps BLAS's own threads out of the way while a program
runs). One pool of threads does all of a program's parallel work, so BLAS's threads never
spin on cores tapejit's loops need.
"""
from __future__ import annotations

import sys

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.linalg import ensure_blas, get_blas_kind, make_constant_slot

from ..disk import store

_char, _intp, _ptr = ir.IntType(8), cgutils.intp_t, ir.IntType(8).as_pointer()

GRAIN = 1 << 21     # a thread's block of a split product has at least this many multiply-adds
SIDE = 32           # ... and at least this many rows (or columns) of the result
FAILED = "BLAS gemm failed (numba_xxgemm returned an error)"


@numba.njit(cache=True)
def parts(m, n, k, threads):
    """How many blocks (one per thread) an (m x k) @ (k x n) product is cut into: as many as
    `threads` allows while each block keeps GRAIN multiply-adds and SIDE rows (columns)."""
    return max(1, min(threads, m * n * k // GRAIN, max(m, n) // SIDE))


@intrinsic
def _gemm(typingctx, ta, tb, m, n, k, a, a_at, lda, b, b_at, ldb, out, c_at, ldc):
    """Rows m x columns n of `out` (row-major, leading dimension ldc, from element c_at) =
    op(a) @ op(b), each operand read from its element `_at` with its leading dimension; the
    BLAS status (0: done). In BLAS's column-major terms that is out^T = op(b)^T @ op(a)^T,
    and a row-major matrix read column-major is its transpose: so b goes first, each with the
    transpose flag of its own operand."""
    if not all(isinstance(x, types.Array) and x.layout == "C" and x.ndim == 2
               for x in (a, b, out)) or len({a.dtype, b.dtype, out.dtype}) != 1:
        return None
    ensure_blas()
    dtype = out.dtype

    def codegen(context, builder, sig, args):
        ta_, tb_, m_, n_, k_, a_, a_at_, lda_, b_, b_at_, ldb_, out_, c_at_, ldc_ = args
        data = [builder.bitcast(builder.gep(context.make_array(t)(context, builder, v).data,
                                            [at]), _ptr)
                for t, v, at in ((a, a_, a_at_), (b, b_, b_at_), (out, out_, c_at_))]
        fnty = ir.FunctionType(ir.IntType(32), [_char, _char, _char, _intp, _intp, _intp,
                                                _ptr, _ptr, _intp, _ptr, _intp, _ptr, _ptr,
                                                _intp])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "numba_xxgemm")
        flag = lambda t: builder.select(t, ir.Constant(_char, ord("t")),  # noqa: E731
                                        ir.Constant(_char, ord("n")))
        alpha = builder.bitcast(make_constant_slot(context, builder, dtype, 1.0), _ptr)
        beta = builder.bitcast(make_constant_slot(context, builder, dtype, 0.0), _ptr)
        kind = ir.Constant(_char, ord(get_blas_kind(dtype)))
        status = builder.call(fn, (kind, flag(tb_), flag(ta_), n_, m_, k_, alpha,
                                   data[1], ldb_, data[0], lda_, beta, data[2], ldc_))
        return builder.sext(status, _intp)

    return types.intp(types.boolean, types.boolean, types.intp, types.intp, types.intp,
                      a, types.intp, types.intp, b, types.intp, types.intp,
                      out, types.intp, types.intp), codegen


@numba.njit(cache=True)
def matmul(a, b, out, ta, tb, threads):
    """out = a @ b, with a (or b) transposed where ta (tb) is True; BLAS reads them in place.
    A product `parts` cuts up for `threads` runs as `blocks`."""
    m, n = out.shape
    k = a.shape[0] if ta else a.shape[1]
    if k == 0 or m == 0 or n == 0:
        out[:] = 0
        return
    count = parts(m, n, k, threads)
    if count > 1:
        blocks(a, b, out, ta, tb, count)
    elif _gemm(ta, tb, m, n, k, a, 0, a.shape[1], b, 0, b.shape[1], out, 0, n):
        raise RuntimeError(FAILED)


@numba.njit(cache=True, parallel=True)
def blocks(a, b, out, ta, tb, count):
    """`matmul` as `count` blocks (at most the longer side of `out`) along the longer side
    of `out`, one per thread."""
    m, n = out.shape
    k = a.shape[0] if ta else a.shape[1]
    lda, ldb = a.shape[1], b.shape[1]
    status = np.zeros(count, np.intp)
    rows = m >= n
    side = m if rows else n
    for p in numba.prange(count):
        lo, hi = side * p // count, side * (p + 1) // count
        if rows:    # rows lo:hi of out and of op(a)
            status[p] = _gemm(ta, tb, hi - lo, n, k, a, lo if ta else lo * lda, lda,
                              b, 0, ldb, out, lo * n, n)
        else:       # columns lo:hi of out and of op(b)
            status[p] = _gemm(ta, tb, m, hi - lo, k, a, 0, lda,
                              b, lo * ldb if tb else lo, ldb, out, lo, n)
    if status.any():
        raise RuntimeError(FAILED)


store.adopt(sys.modules[__name__])   # its machine code lies under TAPEJIT_CACHE_DIR
