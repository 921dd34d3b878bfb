"""User-defined rules as primitives: `stop_gradient`, `custom_vjp_call` and `njit_call`.

Their params are strings naming an entry of `RULES` (so tapes still print, parse and hash):
- `stop_gradient x`: x, with a zero VJP.
- `custom_vjp_call[rule, index, n_out] y0 .. y(n_out-1) x0 ..`: y(index), the output leaf of a
  `tj.custom_vjp` function computed (by its `fwd`, as ordinary traced ops) from its inputs x;
  the VJP calls the user's `bwd` on `fwd`'s residuals (custom.py). The ys get no cotangent.
- `njit_call[kernel] x0 ..`: a user's Numba `@njit` kernel applied to arrays; the entry gives its
  shape rule, calls it in the interpreter and gives its VJP; generated code calls it directly.

`RULES` entries are filled by custom.py, which this package knows nothing about.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..avals import Aval
from . import HOST, MAPPED, Kind, defop, zero_vjp
from . import axes as _axes

RULES: dict[str, Any] = {}   # param string -> the object with the rule (custom.py)

stop_gradient = defop("stop_gradient", Kind.LAYOUT, lambda x: x,
                      shape=lambda x: x, vjp=zero_vjp, axes=_axes.same,   # d sg(x) = 0
                      batch=lambda bind, xs, flags: bind(*xs),
                      cpu=lambda k, eqn, ins, out: k.line(f"{out} = {ins[0]}"), cuda=HOST)


def _marker_shape(*avals: Aval, rule: str, index: int, n_out: int) -> Aval:
    return avals[index]


def _marker_vjp(ct: Any, out: Any, *ins: Any, rule: str, index: int, n_out: int) -> tuple:
    # d custom(x) = bwd(res, ct) (the outputs themselves get none)
    return (None,) * n_out + tuple(RULES[rule].vjp(ct, ins[:n_out], ins[n_out:], index))


custom_vjp_call = defop("custom_vjp_call", Kind.CALL,
                        lambda *ins, rule, index, n_out: ins[index],
                        shape=_marker_shape, vjp=_marker_vjp, batch=MAPPED,
                        cpu=lambda k, eqn, ins, out: k.line(f"{out} = {ins[eqn.kw['index']]}"),
                        cuda=HOST)


def _kernel_impl(*ins: Any, kernel: str) -> np.ndarray:
    return RULES[kernel].impl(*ins)


def _kernel_shape(*avals: Aval, kernel: str) -> Aval:
    return RULES[kernel].shape(*avals)


def _kernel_vjp(ct: Any, out: Any, *ins: Any, kernel: str) -> tuple:
    return tuple(RULES[kernel].vjp(ct, out, *ins))   # the user's rule


def _kernel_cpu(k, eqn, ins, out):
    # generated code calls the kernel directly (a global of the module, disk/store.py)
    aval, call = eqn.outs[0].aval, f"{eqn.kw['kernel']}({', '.join(ins)})"
    if aval.ndim:
        k.line(f"{out} = {call}")
    else:
        k.line(f"{out} = np.empty((), {k.dtype(aval.dtype)})")
        k.line(f"{out}[()] = {call}")


njit_call = defop("njit_call", Kind.CALL, _kernel_impl, shape=_kernel_shape, vjp=_kernel_vjp,
                  batch=MAPPED, cpu=_kernel_cpu, cuda=HOST)
