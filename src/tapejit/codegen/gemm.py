"""tapejit's own matrix product: packed panels and a register-blocked SIMD kernel (float32/64).

Generated code reads this module as `tj_gemm` (calls.py `matmul_call`) where numba targets
AVX-512 (TAPEJIT_MATMUL): there the kernel below ran a 1797x256 @ 256x256 float64 product in
2.0-2.2 ms on one Zen 5 core, against 2.5-2.7 ms for OpenBLAS's AVX-512 kernels and 4.0 ms
for its AVX2 ones (which `OPENBLAS_CORETYPE=Haswell` forces); on AVX2 it ties OpenBLAS
(bench/gemm.py). `matmul` still hands BLAS the products under SMALL multiply-adds and those
with no full tile, where packing costs more than it saves.

The scheme is BLIS's: C (m x n) = op(A) (m x k) @ op(B) (k x n) is cut into blocks of KC
along k (one L2-sized panel of B and block of A at a time); `_pack_b` copies a KC x n panel of
op(B) into strips of NR columns and `_pack_a` a block of MC rows of op(A) into strips of MR
rows (a transposed operand is read in place while packing: no copy of it exists); `_kernel`
multiplies one MR-strip by one NR-strip into an MR x NR tile of C held in registers, as
MR * NR / lanes SIMD accumulators updated by one fused multiply-add per strip row. The first
k block writes C, later ones add to it. Strips are zero-padded, so ragged edges compute a full
tile into a scratch tile and copy the part inside C. The kernel is LLVM IR (an intrinsic):
LLVM keeps the accumulators in registers, where a numba loop would keep them in memory.

The tile shape follows the vector width of numba's target (`VECTOR_BYTES`): 12 x 2 vectors
with AVX-512's 32 registers, 6 x 2 vectors with AVX2's 16. `packed_threads` splits the row
blocks over numba's threads. Programs reach the kernel through C entry points compiled once
(per dtype and threading, into numba's cache) and linked by name (`link`, `matmul`): numba
would otherwise compile it into every program again.
"""
from __future__ import annotations

import sys
import threading

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.core.registry import cpu_target
from numba.extending import intrinsic
from numba.np.numpy_support import as_dtype

from .. import cache

from .blas import matmul as blas_matmul

FEATURES = cpu_target.target_context.codegen().magic_tuple()[2].split(",")
AVX512 = "+avx512f" in FEATURES
VECTOR_BYTES = 64 if AVX512 else 32 if "+avx" in FEATURES else 16
ROWS = 12 if AVX512 else 6     # MR: rows of C a kernel call computes
VECTORS = 2                     # NR = VECTORS * lanes: columns of C a kernel call computes
KC, MC = 256, 192               # block sizes along k and m (a 256 x 16 strip of B fills L1)
SMALL = 1 << 20                 # BLAS computes products of fewer multiply-adds


def _lanes(dtype: types.Type) -> int:
    return VECTOR_BYTES // (dtype.bitwidth // 8)


def tile(dtype: np.dtype) -> tuple[int, int]:
    """(MR, NR): the rows and columns of C one kernel call computes for `dtype`."""
    return ROWS, VECTORS * VECTOR_BYTES // np.dtype(dtype).itemsize


@intrinsic
def _tile(typingctx, arr):
    """`tile` of `arr`'s dtype, as constants."""
    mr_nr = tile(as_dtype(arr.dtype))

    def codegen(context, builder, sig, args):
        return context.make_tuple(builder, sig.return_type,
                                  [context.get_constant(types.intp, v) for v in mr_nr])
    return types.UniTuple(types.intp, 2)(arr), codegen


@intrinsic
def _kernel(typingctx, kc, ap, a_at, bp, b_at, c, c_at, ldc, add):
    """c[c_at + i*ldc + j] (+)= sum over p < kc of ap[a_at + p*MR + i] * bp[b_at + p*NR + j]
    for the MR x NR tile: `add` chooses between adding to C and overwriting it."""
    lanes, align = _lanes(c.dtype), c.dtype.bitwidth // 8

    def codegen(context, builder, sig, args):
        kc_, ap_, a_at_, bp_, b_at_, c_, c_at_, ldc_, add_ = args
        vec = ir.VectorType(context.get_data_type(c.dtype), lanes)
        undef, i32 = ir.Constant(vec, ir.Undefined), ir.IntType(32)

        def at(ptr, offset):        # ptr + offset elements (an int or an IR value)
            return builder.gep(ptr, [ir.Constant(cgutils.intp_t, offset)
                                     if isinstance(offset, int) else offset])

        def vector_at(ptr, offset):
            return builder.bitcast(at(ptr, offset), vec.as_pointer())

        a0, b0, c0 = (at(context.make_array(t)(context, builder, v).data, offset)
                      for t, v, offset in ((ap, ap_, a_at_), (bp, bp_, b_at_), (c, c_, c_at_)))
        fma = cgutils.get_or_insert_function(        # fused where the CPU has FMA
            builder.module, ir.FunctionType(vec, [vec] * 3),
            f"llvm.fmuladd.v{lanes}f{c.dtype.bitwidth}")
        acc = [[cgutils.alloca_once_value(builder, ir.Constant(vec, [0.0] * lanes))
                for _ in range(VECTORS)] for _ in range(ROWS)]
        with cgutils.for_range(builder, kc_) as loop:     # one rank-1 update per strip row
            b_row = at(b0, builder.mul(loop.index, ir.Constant(cgutils.intp_t, VECTORS * lanes)))
            bv = [builder.load(vector_at(b_row, j * lanes), align=align) for j in range(VECTORS)]
            a_row = at(a0, builder.mul(loop.index, ir.Constant(cgutils.intp_t, ROWS)))
            for i in range(ROWS):
                one = builder.insert_element(undef, builder.load(at(a_row, i)), i32(0))
                av = builder.shuffle_vector(one, undef, ir.Constant(ir.VectorType(i32, lanes),
                                                                    [0] * lanes))
                for j in range(VECTORS):
                    builder.store(builder.call(fma, [av, bv[j], builder.load(acc[i][j])]),
                                  acc[i][j])
        with builder.if_else(add_) as (adding, writing):
            for branch, adds in ((adding, True), (writing, False)):
                with branch:
                    for i in range(ROWS):
                        c_row = at(c0, builder.mul(ldc_, ir.Constant(cgutils.intp_t, i)))
                        for j in range(VECTORS):
                            ptr, value = vector_at(c_row, j * lanes), builder.load(acc[i][j])
                            if adds:
                                value = builder.fadd(builder.load(ptr, align=align), value)
                            builder.store(value, ptr, align=align)
        return context.get_dummy_value()

    return types.none(types.intp, ap, types.intp, bp, types.intp, c, types.intp, types.intp,
                      types.boolean), codegen


@numba.njit(cache=True)
def _pack_a(a, ta, i0, p0, mc, kc, ap):
    """Rows i0..i0+mc and columns p0..p0+kc of op(a) as strips of MR rows (zero-padded):
    ap[s*kc*MR + p*MR + i] = op(a)[i0 + s*MR + i, p0 + p]."""
    mr = _tile(ap)[0]
    for s in range(mc // mr):        # full strips: constant trip counts, unrolled copies
        base, top = s * kc * mr, i0 + s * mr
        if ta:
            for p in range(kc):
                for i in range(mr):
                    ap[base + p * mr + i] = a[p0 + p, top + i]
        else:
            for p in range(kc):
                for i in range(mr):
                    ap[base + p * mr + i] = a[top + i, p0 + p]
    rows, base, top = mc % mr, mc // mr * kc * mr, i0 + mc // mr * mr
    if rows:
        for p in range(kc):
            for i in range(mr):
                inside = i < rows
                ap[base + p * mr + i] = (a[p0 + p, top + i] if ta else a[top + i, p0 + p]) \
                    if inside else 0


@numba.njit(cache=True)
def _pack_b(b, tb, p0, kc, n, bp):
    """Rows p0..p0+kc of op(b) (all n columns) as strips of NR columns (zero-padded):
    bp[s*kc*NR + p*NR + j] = op(b)[p0 + p, s*NR + j]. `_pack_a` with NR for MR: one function
    taking the strip width as an argument made the MLP's products 15% slower (the copies need
    constant trip counts to unroll)."""
    nr = _tile(bp)[1]
    for s in range(n // nr):
        base, left = s * kc * nr, s * nr
        if tb:
            for p in range(kc):
                for j in range(nr):
                    bp[base + p * nr + j] = b[left + j, p0 + p]
        else:
            for p in range(kc):
                for j in range(nr):
                    bp[base + p * nr + j] = b[p0 + p, left + j]
    cols, base, left = n % nr, n // nr * kc * nr, n // nr * nr
    if cols:
        for p in range(kc):
            for j in range(nr):
                inside = j < cols
                bp[base + p * nr + j] = (b[left + j, p0 + p] if tb else b[p0 + p, left + j]) \
                    if inside else 0


@numba.njit(cache=True)
def _row_block(a, ta, bp, out, i0, mc, p0, kc, ap, tile):
    """Rows i0..i0+mc of out (+)= op(a)[those rows, p0..p0+kc] @ the packed panel bp."""
    mr, nr = _tile(out)
    m, n = out.shape
    flat = out.reshape(m * n)
    _pack_a(a, ta, i0, p0, mc, kc, ap)
    for jr in range(0, n, nr):          # one strip of B stays in L1 across the strips of A
        cols = min(nr, n - jr)
        for ir in range(0, mc, mr):
            rows = min(mr, mc - ir)
            if rows == mr and cols == nr:
                _kernel(kc, ap, ir * kc, bp, jr * kc, flat, (i0 + ir) * n + jr, n, p0 > 0)
                continue
            _kernel(kc, ap, ir * kc, bp, jr * kc, tile, 0, nr, False)
            for i in range(rows):
                for j in range(cols):
                    if p0 > 0:
                        out[i0 + ir + i, jr + j] += tile[i * nr + j]
                    else:
                        out[i0 + ir + i, jr + j] = tile[i * nr + j]


@numba.njit(cache=True)
def _depth(a, ta):
    """(k, the k-block size): k cut into equal blocks of at most KC."""
    k = a.shape[0] if ta else a.shape[1]
    blocks = max(1, (k + KC - 1) // KC)
    return k, (k + blocks - 1) // blocks


@numba.njit(cache=True)
def _blas_wins(a, out, ta):
    """Whether BLAS computes out: a product with no full tile or under SMALL multiply-adds,
    where its lighter set-up beats packing (measured against OpenBLAS's AVX-512 kernels)."""
    (m, n), (mr, nr) = out.shape, _tile(out)
    k = a.shape[0] if ta else a.shape[1]
    return m < mr or n < nr or m * n * k < SMALL


@numba.njit(cache=True)
def _zeros(out):
    """out = 0: a product with an empty sum (k == 0)."""
    m, n = out.shape
    for i in range(m):
        for j in range(n):
            out[i, j] = 0


@numba.njit(cache=True)
def packed(a, b, out, ta, tb):
    """out = op(a) @ op(b) by packed panels, op transposing where ta (tb) is True; every
    operand C-contiguous."""
    m, n = out.shape
    mr, nr = _tile(out)
    k, kc_max = _depth(a, ta)
    if k == 0:
        _zeros(out)
        return
    bp = np.empty((n + nr - 1) // nr * nr * kc_max, out.dtype)
    ap = np.empty((min(MC, m) + mr - 1) // mr * mr * kc_max, out.dtype)
    tile = np.empty(mr * nr, out.dtype)
    for p0 in range(0, k, kc_max):
        kc = min(kc_max, k - p0)
        _pack_b(b, tb, p0, kc, n, bp)
        for i0 in range(0, m, MC):
            _row_block(a, ta, bp, out, i0, min(MC, m - i0), p0, kc, ap, tile)


@numba.njit(cache=True, parallel=True)
def packed_threads(a, b, out, ta, tb):
    """`packed` with the row blocks of each k block on numba's threads: at least 16 blocks
    where m allows (the thread count would be a global numba cannot cache)."""
    m, n = out.shape
    mr, nr = _tile(out)
    k, kc_max = _depth(a, ta)
    if k == 0:
        _zeros(out)
        return
    mc = min(MC, max(mr, ((m + 15) // 16 + mr - 1) // mr * mr))
    bp = np.empty((n + nr - 1) // nr * nr * kc_max, out.dtype)
    for p0 in range(0, k, kc_max):
        kc = min(kc_max, k - p0)
        _pack_b(b, tb, p0, kc, n, bp)
        for block in numba.prange((m + mc - 1) // mc):
            ap = np.empty(mc * kc_max, out.dtype)
            tile = np.empty(mr * nr, out.dtype)
            i0 = block * mc
            _row_block(a, ta, bp, out, i0, min(mc, m - i0), p0, kc, ap, tile)


# ---- the entry points generated code calls ----------------------------------------------------
# numba compiles the code of every jitted function a program calls into that program again:
# `packed` cost each new MLP gradient program 0.5 s of compile time, `packed_threads` (a
# parallel loop) 2.5 s. So programs call them as C functions compiled once: `link` compiles (or
# loads from numba's cache) the C entry point of one dtype and threading, and gives LLVM its
# address under a name; `matmul` calls that name.

def _serial(a, b, out, m, n, k, ta, tb):
    packed(_matrix(a, m, k, ta), _matrix(b, k, n, tb), numba.carray(out, (m, n)), ta, tb)


def _threads(a, b, out, m, n, k, ta, tb):
    packed_threads(_matrix(a, m, k, ta), _matrix(b, k, n, tb), numba.carray(out, (m, n)), ta,
                   tb)


@numba.njit(cache=True)
def _matrix(ptr, rows, cols, transposed):
    """The C-contiguous array at `ptr` whose op() is (rows, cols): stored (cols, rows) where
    transposed."""
    return numba.carray(ptr, (cols, rows) if transposed else (rows, cols))


_linked: dict[tuple[str, bool], object] = {}
_link_lock = threading.Lock()


def _symbol(dtype: str, threads: bool) -> str:
    return f"tapejit_gemm_{dtype}_{'threads' if threads else 'serial'}"


def link(dtype: str, threads: bool) -> None:
    """Make `matmul` (`matmul_threads` if threads) callable for arrays of `dtype` ("float32" or
    "float64"): generated modules call this when they load, before their entry point compiles
    or loads from numba's cache."""
    with _link_lock:
        if (dtype, threads) in _linked:
            return
        if threads:     # starts numba's thread pool, whose symbols parallel code links to
            numba.get_num_threads()
        t = getattr(types, dtype)
        signature = types.void(types.CPointer(t), types.CPointer(t), types.CPointer(t),
                               types.intp, types.intp, types.intp, types.boolean, types.boolean)
        entry = numba.cfunc(signature, cache=True)(_threads if threads else _serial)
        llvm.add_symbol(_symbol(dtype, threads), entry.address)
        _linked[dtype, threads] = entry        # keeps the code alive


def _linked_call(threads: bool):
    """An intrinsic calling the linked C entry point for its arrays' dtype."""
    @intrinsic
    def call(typingctx, a, b, out, ta, tb):
        if not all(isinstance(x, types.Array) and x.layout == "C" and x.ndim == 2
                   and x.dtype == out.dtype for x in (a, b, out)):
            return None

        def codegen(context, builder, sig, args):
            a_, b_, out_, ta_, tb_ = args
            arrays = [context.make_array(t)(context, builder, v)
                      for t, v in zip((a, b, out), (a_, b_, out_))]
            m, n = cgutils.unpack_tuple(builder, arrays[2].shape, 2)
            k = builder.select(ta_, *cgutils.unpack_tuple(builder, arrays[0].shape, 2))
            ptr = arrays[0].data.type
            fnty = ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr] + [cgutils.intp_t] * 3
                                   + [ta_.type, tb_.type])
            fn = cgutils.get_or_insert_function(builder.module, fnty,
                                                _symbol(str(out.dtype), threads))
            builder.call(fn, [x.data for x in arrays] + [m, n, k, ta_, tb_])
            return context.get_dummy_value()
        return types.none(a, b, out, ta, tb), codegen
    return call


_call_serial, _call_threads = _linked_call(False), _linked_call(True)


@numba.njit(cache=True)
def matmul(a, b, out, ta, tb):
    """out = op(a) @ op(b) (see `packed`): by packing, or by BLAS where that wins. Needs
    `link(dtype, False)` first."""
    if _blas_wins(a, out, ta):
        blas_matmul(a, b, out, ta, tb)
    else:
        _call_serial(a, b, out, ta, tb)


@numba.njit(cache=True)
def matmul_threads(a, b, out, ta, tb):
    """`matmul` on numba's threads (BLAS threads itself). Needs `link(dtype, True)` first."""
    if _blas_wins(a, out, ta):
        blas_matmul(a, b, out, ta, tb)
    else:
        _call_threads(a, b, out, ta, tb)


cache.adopt(sys.modules[__name__])   # its machine code lies under TAPEJIT_CACHE_DIR
