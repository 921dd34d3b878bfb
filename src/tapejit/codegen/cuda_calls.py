"""CUDA code for what is not a loop nest: the combining kernel of per-block partial results,
and barriers: each op's record holds its code (`Op.cuda`: matrix products are kernels, reshape
and dim_size need none) or declares that it runs on the host (`HOST`, cuda_support.host_call)."""
from __future__ import annotations

from ..ir import Eqn
from ..ops import HOST, OPS
from .cuda_base import Generator, Reads, unravel, var_name
from .scalar import combine_of, reduction_init
from .writer import comment


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
    """A barrier: its record's `cuda` code, or a run on the host (`cuda=HOST`)."""
    g.driver.line(comment(eqn, g.sizes))
    code = OPS[eqn.op].cuda
    if code == HOST:
        g.host_call(eqn)
    elif code is None:
        raise NotImplementedError(f"the CUDA backend has no code for op {eqn.op}")
    else:
        code(g, number, eqn)
