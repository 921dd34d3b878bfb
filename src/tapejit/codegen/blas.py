"""Matrix products for generated code: one small cached function shared by every program.

numba compiles its `np.dot` implementation again for each combination of operand layouts a
function uses (C @ C, C.T @ C, C @ C.T: about 0.17 s each, measured), in every program's
first compile. Generated code calls `tj_blas.matmul(a, b, out, ta, tb)` instead, with
C-contiguous operands and flags saying which to transpose. It calls the BLAS `gemm` numba
itself uses (`numba_xxgemm`, scipy's BLAS) directly, with the transposes as BLAS flags, and is
compiled once per dtype into numba's cache, like the vmath kernels: a new program only types a
call to it. Generated code reads this module as `tj_blas` (calls.py `blas_call`)."""
from __future__ import annotations

import sys

import numba
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.linalg import check_blas_return, ensure_blas, get_blas_kind, make_constant_slot

from .. import cache

_char, _intp, _ptr = ir.IntType(8), cgutils.intp_t, ir.IntType(8).as_pointer()


@intrinsic
def _gemm(typingctx, ta, tb, m, n, k, a, b, out):
    """out (m x n, row-major) = op(a) @ op(b). In BLAS's column-major terms that is
    out^T = op(b)^T @ op(a)^T, and a row-major matrix read column-major is its transpose: so
    b goes first, each with the transpose flag of its own operand."""
    if not all(isinstance(x, types.Array) and x.layout == "C" and x.ndim == 2
               for x in (a, b, out)) or len({a.dtype, b.dtype, out.dtype}) != 1:
        return None
    ensure_blas()
    dtype = out.dtype

    def codegen(context, builder, sig, args):
        ta_, tb_, m_, n_, k_, a_, b_, out_ = args
        arrays = [context.make_array(t)(context, builder, v) for t, v in zip((a, b, out),
                                                                               (a_, b_, out_))]
        (a_data, a_shape), (b_data, b_shape), (c_data, _) = [
            (builder.bitcast(x.data, _ptr), cgutils.unpack_tuple(builder, x.shape, 2))
            for x in arrays]
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
                                   b_data, b_shape[1], a_data, a_shape[1], beta, c_data, n_))
        check_blas_return(context, builder, status)
        return context.get_dummy_value()

    return types.none(types.boolean, types.boolean, types.intp, types.intp, types.intp,
                      a, b, out), codegen


@numba.njit(cache=True)
def matmul(a, b, out, ta, tb):
    """out = a @ b, with a (or b) transposed where ta (tb) is True; BLAS reads them in place."""
    m, n = out.shape
    k = a.shape[0] if ta else a.shape[1]
    if k == 0 or m == 0 or n == 0:
        for i in range(m):
            for j in range(n):
                out[i, j] = 0
        return
    _gemm(ta, tb, m, n, k, a, b, out)


cache.adopt(sys.modules[__name__])   # its machine code lies under TAPEJIT_CACHE_DIR
