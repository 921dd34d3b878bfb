"""Ops run for an effect: `check`, the assertion `tj.check(pred, msg, *args, **kwargs)` records.

- `check[msg, names] pred values..` -> bool[]: whether every element of `pred` is true;
  `values` are the message's format arguments, `names` their keywords ("0", "1", .. for the
  positional ones). Its effect is the error a failed check is: dce keeps its eqns
  (`effect=True`) though nothing reads their output.

No backend runs a check. `tj.checkify` turns each one into an error code its program returns
(passes/checkify.py); a check left in a program run without checkify refuses to run, on the
interpreter and in code generation alike, as JAX's `checkify.check` refuses to be staged out
(jit, grad, scan) without `checkify`. Its output has no derivative (zero_vjp): gradients flow
past a check unchanged.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..avals import Aval
from ..errors import UncheckedError, at_source
from ..ir import Src
from . import HOST, Kind, defop, zero_vjp

_BOOL = Aval((), np.dtype(np.bool_))


def format_message(msg: str, names: Sequence[str], values: Sequence[Any]) -> str:
    """`msg` with its format arguments filled in (positional ones named "0", "1", ..)."""
    positional = [v for n, v in zip(names, values) if n.isdigit()]
    named = {n: v for n, v in zip(names, values) if not n.isdigit()}
    return msg.format(*positional, **named)


def unchecked(msg: str, src: Src | None) -> UncheckedError:
    """The error of a check run outside `tj.checkify`."""
    return UncheckedError(at_source(
        f"tj.check({msg!r}) ran in a program without tj.checkify: a check's failure is an "
        f"effect that tj.jit, tj.grad and the other transforms cannot compile (as in JAX). "
        f"Wrap the function: `err, out = tj.checkify(f)(x)`, then `err.throw()`; or test "
        f"the values after the call", src))


def _impl(pred: Any, *values: Any, msg: str, names: tuple[str, ...]) -> Any:
    raise unchecked(msg, None)


def _cpu(k: Any, eqn: Any, ins: Any, out: Any) -> None:
    raise unchecked(eqn.kw["msg"], eqn.src)


check = defop("check", Kind.CALL, _impl, shape=lambda pred, *values, msg, names: _BOOL,
              vjp=zero_vjp,   # not differentiable: its output is a bool, its inputs get none
              batch=lambda bind, values, flags, **params: bind(*values, **params),
              cpu=_cpu, cuda=HOST, effect=True)
