"""How control flow runs under checkify: the `checkify` rules of the control-flow ops whose
bodies hold `tj.check`s (passes/checkify.py calls them; ops/__init__.py gives the contract).

- `scan` (static length): the body, checked, also returns its error code and its checks'
  values at each step, stacked as extra ys; the scan's code is that of the first step run
  that failed (the last index with `reverse`), and the values are that step's. Steps past
  the run-time trip count are not read.

A while loop, a branch, a checkpoint and a scan of run-time length have no rule yet: checkify
refuses a check inside them, naming the op and the fix.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..errors import UnsupportedOperationError, at_source
from ..ir import Eqn, Tape
from ..ops import OPS

I32 = np.dtype(np.int32)


def scan(eqn: Eqn, ins: list[Any], checked: Callable[[Tape], Tape]) -> tuple:
    kw = dict(eqn.kw)
    body, n_carry, length = kw["body"], kw["n_carry"], kw["length"]
    if length is None:
        raise UnsupportedOperationError(at_source(
            "tj.check inside a loop of run-time length: checkify needs a static number of "
            "steps (give the loop Python-int bounds)", eqn.src))
    kw["body"] = checked(body)
    outs = OPS[eqn.op](*ins, **kw)
    n_ys = len(body.outvars) - n_carry
    n_extra = len(kw["body"].outvars) - len(body.outvars)
    extra = outs[n_carry + n_ys:n_carry + n_ys + n_extra]
    rest = outs[:n_carry + n_ys] + outs[n_carry + n_ys + n_extra:]
    if length == 0:
        return rest, np.zeros((), I32), [np.zeros(p.shape[1:], p.dtype) for p in extra[1:]]
    failed = (extra[0] != 0) & (np.arange(length) < ins[0])    # steps run: k < n
    step = (length - 1 - np.argmax(failed[::-1]) if kw["reverse"]
            else np.argmax(failed))
    anywhere = np.any(failed)
    code = np.where(anywhere, extra[0][step], np.zeros((), I32))
    payload = [np.where(anywhere, p[step], np.zeros(p.shape[1:], p.dtype)) for p in extra[1:]]
    return rest, code, payload
