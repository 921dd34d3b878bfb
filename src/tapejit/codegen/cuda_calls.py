"""CUDA kernels for what is not a loop nest: the combining kernel of per-block partial
results, matrix products (tiled, or one thread per output element), and the barriers run on
the host (cuda_support.host_call); reshape and dim_size need no kernel."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..ir import Eqn, Var
from ..ops.linalg import free_axes
from .cpu import combine_of, comment, reduction_init
from .cuda_base import Generator, Reads, unravel, var_name
from .writer import dtype_code, scalar


def emit_combine(g: Generator, name: str, eqn: Eqn) -> None:
    """The kernel combining the per-block partial results of reduction `eqn`."""
    out = eqn.outs[0]
    shape, partial = out.aval.shape, f"t_p_{var_name(out)}"
    k = Reads(g)
    idx = [f"t_z{d}" for d in range(len(shape))]
    combine = combine_of(eqn)
    n = g.sizes.product(shape)
    inner: list[str] = []
    unravel(inner, "t_f", idx, [g.sizes(m) for m in shape])
    part = f"{partial}[{', '.join(['t_j'] + idx)}]"
    inner += [f"t_acc = {reduction_init(eqn)}", f"for t_j in range({partial}.shape[0]):",
              f"    t_acc = {combine.format('t_acc', part)}", f"{k.array(out, idx)} = t_acc"]
    g.add_kernel(name, [partial] + k.params,
                 [f"for t_f in range(cuda.grid(1), {n}, cuda.gridsize(1)):"]
                 + ["    " + line for line in inner])
    g.driver.line(f"{name}[tjrt.blocks({n}), TPB]({', '.join([partial] + k.params)}, t_Sd)")


def emit_call(g: Generator, number: int, eqn: Eqn) -> None:
    g.driver.line(comment(eqn, g.sizes))
    out = eqn.outs[0]
    if eqn.op == "dot_general":
        emit_dot(g, number, eqn)
    elif eqn.op == "dim_size":
        g.driver.line(f"{var_name(out)} = tjrt.full((), {dtype_code(out.aval.dtype)}, "
                      f"{g.sizes(math.prod(eqn.kw['sizes']))})")
    elif eqn.op == "reshape" and isinstance(eqn.ins[0], Var):
        g.driver.line(f"{var_name(out)} = tjrt.reshape({var_name(eqn.ins[0])}, "
                      f"{g.sizes.shape(g.sizes.of(eqn.outs[0]))})")
    else:
        args = [var_name(a) for a in eqn.ins if isinstance(a, Var)]
        names = "".join(var_name(o) + ", " for o in eqn.outs)
        g.driver.line(f"{names}= tjrt.host_call(t_E[{len(g.host)}], [{', '.join(args)}])")
        g.host.append(eqn)


def emit_dot(g: Generator, number: int, eqn: Eqn) -> None:
    """A matrix product as a kernel: a plain one (one row, one column, one contracted axis,
    either operand possibly transposed) in shared-memory tiles, any other as one thread per
    output element with a loop over the contracted axes."""
    (lc, rc), (lb, rb) = eqn.kw["contract"], eqn.kw["batch"]
    lhs, rhs, out = eqn.ins[0], eqn.ins[1], eqn.outs[0]
    lf, rf = free_axes(lhs.aval.ndim, lc, lb), free_axes(rhs.aval.ndim, rc, rb)
    k = Reads(g)

    def reads(o: list[str], lhs_c: list[str], rhs_c: list[str]) -> tuple[str, str]:
        def parts(axes_b, axes_f, axes_c, ndim, offset, c):
            return [o[axes_b.index(a)] if a in axes_b else
                    o[offset + axes_f.index(a)] if a in axes_f else c[axes_c.index(a)]
                    for a in range(ndim)]
        return (k.read(lhs, parts(lb, lf, lc, lhs.aval.ndim, len(lb), lhs_c)),
                k.read(rhs, parts(rb, rf, rc, rhs.aval.ndim, len(lb) + len(lf), rhs_c)))

    g.allocate(out)
    name = f"t_k{number}"
    if not lb and len(lf) == len(rf) == len(lc) == 1 and out.aval.dtype.kind == "f":
        m, n = g.sizes(lhs.aval.shape[lf[0]]), g.sizes(rhs.aval.shape[rf[0]])
        body = tiled(reads, k.array(out, ["t_row", "t_col"]), m, n,
                      g.sizes(lhs.aval.shape[lc[0]]), out.aval.dtype)
        g.add_kernel(name, k.params, body)
        g.driver.line(f"{name}[(tjrt.tiles({n}), tjrt.tiles({m})), (TILE, TILE)]"
                      f"({', '.join(k.params + ['t_Sd'])})")
        return
    shape = out.aval.shape
    o = [f"t_o{d}" for d in range(len(shape))]
    c = [f"t_c{d}" for d in range(len(lc))]
    a, b = reads(o, c, c)
    size = g.sizes.product(shape)
    inner: list[str] = []
    unravel(inner, "t_f", o, [g.sizes(n) for n in shape])
    inner.append(f"t_acc = {scalar(0, out.aval.dtype)}")
    for depth, (index, axis) in enumerate(zip(c, lc)):
        inner.append("    " * depth + f"for {index} in range({g.sizes(lhs.aval.shape[axis])}):")
    inner.append("    " * len(c) + f"t_acc += {a} * {b}")
    inner.append(f"{k.array(out, o)} = t_acc")
    g.add_kernel(name, k.params, [f"for t_f in range(cuda.grid(1), {size}, cuda.gridsize(1)):"]
                 + ["    " + line for line in inner])
    g.driver.line(f"{name}[tjrt.blocks({size}), TPB]({', '.join(k.params + ['t_Sd'])})")


def tiled(reads: Callable[..., tuple[str, str]], target: str, m: str, n: str, size_k: str,
           dtype: np.dtype) -> list[str]:
    """The body of a tiled product kernel: block (x, y) computes the TILE x TILE tile of
    output columns x, rows y; each step stages a tile of each operand in shared memory."""
    zero = scalar(0, dtype)
    a, b = reads(["t_row", "t_col"], ["t_ka"], ["t_kb"])
    return [f"t_sa = cuda.shared.array((TILE, TILE), {dtype_code(dtype)})",
            f"t_sb = cuda.shared.array((TILE, TILE), {dtype_code(dtype)})",
            "t_tx, t_ty = cuda.threadIdx.x, cuda.threadIdx.y",
            "t_row = cuda.blockIdx.y * TILE + t_ty",
            "t_col = cuda.blockIdx.x * TILE + t_tx",
            f"t_acc = {zero}",
            f"for t_t in range(0, {size_k}, TILE):",
            "    t_ka, t_kb = t_t + t_tx, t_t + t_ty",
            f"    t_sa[t_ty, t_tx] = {a} if t_row < {m} and t_ka < {size_k} else {zero}",
            f"    t_sb[t_ty, t_tx] = {b} if t_kb < {size_k} and t_col < {n} else {zero}",
            "    cuda.syncthreads()",
            "    for t_j in range(TILE):",
            "        t_acc += t_sa[t_ty, t_j] * t_sb[t_j, t_tx]",
            "    cuda.syncthreads()",
            f"if t_row < {m} and t_col < {n}:",
            f"    {target} = t_acc"]
