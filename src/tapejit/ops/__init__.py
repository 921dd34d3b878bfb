"""THE op table: one `defop` entry per primitive of the IR.

An `Op` holds, side by side, everything the pipeline needs to know about a primitive:

- `shape(*avals, **params) -> Aval`: its shape and dtype rule (used by tracing and typecheck);
  an op defined with `multiple_results=True` (control flow, fused groups) has a tuple of
  outputs: its shape rule returns a tuple of avals, `impl` a tuple of arrays, and `vjp`
  receives tuples of cotangents (None where an output has none) and of outputs;
- `impl(*arrays, **params) -> ndarray`: its numpy reference implementation (the interpreter);
- `vjp(ct, out, *ins, **params) -> tuple`: its reverse-mode rule, written with traced ops so the
  reverse sweep is ordinary IR that can be differentiated again. It returns one cotangent per
  input (None for no contribution); cotangents may have the broadcast shape of the output, since
  autodiff unbroadcasts them centrally. `zero_vjp` marks an op whose gradient is zero or which is
  not differentiable (integer/bool results): the choice is always written down, never implied;
- `axes(operand shapes, output shape, **params) -> groups`: which axes the op forces to be
  one axis (ops/axes.py); by default from its kind (broadcasting for elementwise ops, kept
  axes for reductions, nothing for calls and control flow).

Calling an Op binds it: on tracers it records an equation, on concrete arrays it runs `impl`.
The binder is installed by `trace.py`, so this package depends on nothing above it.
Passes and backends dispatch on these fields, never on op names.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable

from ..avals import Aval
from . import axes as _axes


class Kind(enum.Enum):
    ELEMENTWISE = "elementwise"   # numpy-broadcasting n-ary scalar map
    REDUCE = "reduce"             # reductions over axes
    LAYOUT = "layout"             # broadcast, reshape, transpose, slice, pad, concatenate, ...
    SCAN = "scan"                 # cumulative ops along one axis
    LINALG = "linalg"             # dot_general
    INDEX = "index"               # gather / scatter with integer index arrays
    FUSED = "fused"               # a group of ops run as one loop nest; its body is a sub-tape
    CONTROL = "control"           # loops, branches, checkpoints: sub-tapes run as functions
    CALL = "call"                 # a user's function or kernel (custom.py): an opaque call


@dataclasses.dataclass(frozen=True, eq=False)
class Op:
    name: str
    kind: Kind
    impl: Callable[..., Any]
    shape: Callable[..., Aval]
    vjp: Callable[..., tuple]
    axes: _axes.AxesRule
    multiple_results: bool = False

    def __call__(self, *args: Any, **params: Any) -> Any:
        return _binder(self, args, params)

    def __repr__(self) -> str:
        return f"Op({self.name})"


OPS: dict[str, Op] = {}


_DEFAULT_AXES = {Kind.ELEMENTWISE: _axes.broadcast, Kind.REDUCE: _axes.kept,
                 Kind.SCAN: _axes.same}


def defop(name: str, kind: Kind, impl: Callable[..., Any], *,
          shape: Callable[..., Any], vjp: Callable[..., tuple],
          axes: _axes.AxesRule | None = None, multiple_results: bool = False) -> Op:
    """Register a primitive. Its name must be new."""
    assert name not in OPS, f"op {name} defined twice"
    op = Op(name, kind, impl, shape, vjp, axes or _DEFAULT_AXES.get(kind, _axes.none),
            multiple_results)
    OPS[name] = op
    return op


def zero_vjp(ct: Any, out: Any, *ins: Any, **params: Any) -> tuple:
    """The VJP of an op with zero gradient (floor, sign) or non-float results (comparisons)."""
    return (None,) * len(ins)


def _unbound(op: Op, args: tuple, params: dict) -> Any:
    raise RuntimeError("tapejit.trace was not imported: no binder installed")


_binder: Callable[[Op, tuple, dict], Any] = _unbound


def set_binder(binder: Callable[[Op, tuple, dict], Any]) -> None:
    """Installed once by trace.py: how calling an Op records or evaluates it."""
    global _binder
    _binder = binder


from . import elementwise, reduce, layout, linalg, index, fused, control  # noqa: E402,F401  (register the ops)
from . import custom  # noqa: E402,F401  (stop_gradient, custom_vjp_call, njit_call)
