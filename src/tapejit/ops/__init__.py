"""THE op table: one `defop` entry per primitive of the IR.

An `Op` holds, side by side, everything the pipeline needs to know about a primitive:

- `shape(*avals, **params) -> Aval`: its shape and dtype rule (used by tracing and typecheck);
  an op defined with `multiple_results=True` (control flow, fused groups) has a tuple of
  outputs: its shape rule returns a tuple of avals, `impl` a tuple of arrays, and `vjp`
  receives tuples of cotangents (None where an output has none) and of outputs;
- `impl(*arrays, **params) -> ndarray`: its numpy reference implementation (the interpreter);
- `vjp(ct, out, *ins, **params) -> tuple`: its reverse-mode rule, written with traced ops so the
  reverse sweep is ordinary IR that can be differentiated again. It returns one cotangent per
  input (None for no contribution, a `NoDerivative` where the op has no rule for that input:
  autodiff raises it where a gradient needs it); cotangents may have the broadcast shape of
  the output, since autodiff unbroadcasts them centrally. `zero_vjp` marks an op whose gradient is zero or which is
  not differentiable (integer/bool results): the choice is always written down, never implied;
- `axes(operand shapes, output shape, **params) -> groups`: which axes the op forces to be
  one axis (ops/axes.py); by default from its kind (broadcasting for elementwise ops, kept
  axes for reductions, nothing for calls and control flow);
- `batch(bind, values, flags, **params)`: its batching rule (batching.py): the op on values
  of which those flagged carry a leading batch axis, recorded through `bind(*values,
  **params)` (this op with new params; `bind.record(other_op, *values, **params)` records
  another op, also on constants only); NotImplemented where it has no rule for these flags.
  `MAPPED` declares that batching runs the op in a compiled loop over the batch axis (user
  code, control flow). Elementwise ops batch by their kind.

How the code generators run it (passes and backends read these; none switches on op names):
- `scalar`: an elementwise op's per-element expression, operands `{0}`, `{1}`, ... and the
  result dtype's constructor `{out}` (or a function of the eqn giving it); the CUDA kernels
  use `cuda_scalar` where it is given (a `ByKind` when int and float forms differ; a function
  of the eqn like `scalar`); with
  `vmath` (or where `vmath(eqn)` holds) the CPU's fast math calls the vectorised kernel of
  codegen/vmath.py named after the op;
  `cheap` ops are recomputed where read rather than stored (codegen/plan.py);
- `ufuncs`: the numpy ufuncs an elementwise op implements (numpy_api/math.py lowers them to
  it; "scipy.special.erf" names one of a module tapejit does not import, lowered once it is
  imported), their operands promoted as numpy does: `promotion` "arith" computes in the result
  dtype, "compare" in the operands' common dtype (bool result), "logic" on bools;
- `view`: a `View`, the index map of a layout op that runs as reads inside a loop nest;
- `reduction`: a `Reduction`, identity and combine of a reduction that loop nests run;
- `cpu`, `cuda`: the code of a barrier (an op that runs outside loop nests):
  `cpu(kit, eqn, ins, out)` writes numba source through `kit` (codegen/calls.py `Kit`: lines,
  sizes, loop nests, BLAS products, sub-tape functions), `cuda(g, number, eqn)` kernels and
  driver lines through `g` (codegen/cuda_base.py `Generator`); `cuda=HOST` runs it on the host
  between kernels. The op modules never import code generation: they write with what they
  are given. `fresh`: its result is a new array, never a view of its inputs.
- `effect`: the op is run for an effect (`check`: failing is an error), so dce keeps its eqns
  though nothing reads their outputs (ir.EFFECTS).
- `checkify(eqn, ins, checked) -> (outs, code, payload)`: how a control-flow op whose
  sub-tapes hold checks runs under checkify (passes/checkify.py): it records the op on `ins`
  with each sub-tape `checked(tape)` (which appends an error code and the checks' values to
  its outputs) and returns the op's outputs, the code of its first failed site (numbered as
  in its sub-tapes, 0 for none) and the values of every site's message, in order.

Ops live in this package, except those whose rules need the layers above: `fused` is defined
with fusion (passes/fuse.py) and the control-flow ops with control flow (control/).

Calling an Op binds it: on tracers it records an equation, on concrete arrays it runs `impl`.
The binder is installed by `trace.py`, so this package depends on nothing above it.
Passes and backends dispatch on these fields, never on op names.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any, Callable, NamedTuple

from ..avals import Aval
from ..ir import EFFECTS
from . import axes as _axes


class Kind(enum.Enum):
    ELEMENTWISE = "elementwise"   # numpy-broadcasting n-ary scalar map
    REDUCE = "reduce"             # reductions over axes
    LAYOUT = "layout"             # broadcast, reshape, transpose, slice, pad, concatenate, ...
    SCAN = "scan"                 # cumulative ops along one axis
    SORT = "sort"                 # sorting along one axis, searching a sorted array
    LINALG = "linalg"             # dot_general
    INDEX = "index"               # gather / scatter with integer index arrays
    FUSED = "fused"               # a group of ops run as one loop nest; its body is a sub-tape
    CONTROL = "control"           # loops, branches, checkpoints: sub-tapes run as functions
    CALL = "call"                 # a user's function or kernel (custom.py): an opaque call
    SEGMENT = "segment"           # a part of a long tape run as a function (codegen/segments.py)


class ByKind(NamedTuple):
    """Scalar templates by operand dtype: `floats` for float operands, `others` otherwise.
    Besides the operands they may use `{dtype}` (the operand dtype's numba name) and `{f}`
    ("f" for float32, the suffix of libdevice's float32 functions)."""
    floats: str
    others: str


@dataclasses.dataclass(frozen=True)
class View:
    """A layout op read in place: `index(eqn, read, sizes, idx)` is the expression of the
    element at output position `idx` (index expressions), operands read through `read(k,
    parts)`; `applies(eqn)` says whether this eqn is such a view (always if None). A view that
    only places its operand's axes (a broadcast, a squeeze) has `placed(eqn)`: the output axes
    its operand's axes of length > 1 land on, in order."""
    index: Callable[..., str]
    applies: Callable[..., bool] | None = None
    placed: Callable[..., list[int]] | None = None


class Reduction(NamedTuple):
    """A reduction loop nests run: its identity (a Python number) and how it combines two
    partial results `{0}`, `{1}` (`bool_combine` for bool operands). A sum (`is_sum`) is split
    into per-thread partial sums by numba's parallel loops themselves."""
    identity: float
    combine: str
    bool_combine: str | None = None
    is_sum: bool = False


HOST = "host"          # `cuda=HOST`: the CUDA backend runs the op on the host
MAPPED = "mapped"      # `batch=MAPPED`: batching runs it in a compiled loop over the batch axis


@dataclasses.dataclass(frozen=True, eq=False)
class Op:
    """A primitive's whole record (`defop`): its numpy implementation, shape and VJP rules,
    and how each pass and backend treats it."""
    name: str
    kind: Kind
    impl: Callable[..., Any]
    shape: Callable[..., Aval]
    vjp: Callable[..., tuple]
    axes: _axes.AxesRule
    multiple_results: bool = False
    batch: Callable[..., Any] | str | None = None
    scalar: str | Callable[..., str] | None = None
    cuda_scalar: ByKind | str | Callable[..., str] | None = None
    vmath: bool | Callable[..., bool] = False
    cheap: bool = False
    ufuncs: tuple[Any, ...] = ()
    promotion: str = "arith"
    view: View | None = None
    reduction: Reduction | None = None
    cpu: Callable[..., None] | None = None
    cuda: Callable[..., None] | str | None = None
    fresh: bool = False
    effect: bool = False
    checkify: Callable[..., Any] | None = None

    def is_view(self, eqn: Any) -> bool:
        """Whether `eqn` (of this op) runs as reads inside a loop nest."""
        return self.view is not None and (self.view.applies is None or self.view.applies(eqn))

    def __call__(self, *args: Any, **params: Any) -> Any:
        return _binder(self, args, params)

    def __repr__(self) -> str:
        return f"Op({self.name})"


OPS: dict[str, Op] = {}


_DEFAULT_AXES = {Kind.ELEMENTWISE: _axes.broadcast, Kind.REDUCE: _axes.kept,
                 Kind.SCAN: _axes.same}


def defop(name: str, kind: Kind, impl: Callable[..., Any], *,
          shape: Callable[..., Any], vjp: Callable[..., tuple],
          axes: _axes.AxesRule | None = None, **fields: Any) -> Op:
    """Register a primitive (the other `Op` fields by keyword). Its name must be new."""
    assert name not in OPS, f"op {name} defined twice"
    op = Op(name, kind, impl, shape, vjp, axes or _DEFAULT_AXES.get(kind, _axes.none), **fields)
    OPS[name] = op
    if op.effect:
        EFFECTS.add(name)
    return op


def is_view(eqn: Any) -> bool:
    """Whether `eqn` runs as reads inside a loop nest (its op's `View`)."""
    return OPS[eqn.op].is_view(eqn)


def nest_reduction(eqn: Any) -> Reduction | None:
    """The `Reduction` a loop nest runs for `eqn`; None for other eqns (and for a reduction
    over unit axes only, which is a view)."""
    reduction = OPS[eqn.op].reduction
    return None if reduction is None or is_view(eqn) else reduction


@dataclasses.dataclass(frozen=True)
class NoDerivative:
    """What a VJP returns for an input the op has no derivative rule for (`message` names the
    function, the argument and the fix): autodiff raises it where that input needs a gradient,
    and drops it elsewhere. Never a silent zero."""
    message: str


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


from . import elementwise, reduce, layout, linalg, index  # noqa: E402,F401  (register the ops)
from . import decompositions  # noqa: E402,F401  (np.linalg's solve, eigh, svd, ...)
from . import custom  # noqa: E402,F401  (stop_gradient, custom_vjp_call, njit_call)
from . import random  # noqa: E402,F401  (threefry2x32, iota: tj.random's bits)
from . import special  # noqa: E402,F401  (scipy.special's erf, digamma, ... where scipy is)
from . import special_incomplete  # noqa: E402,F401  (gammainc, gammaincc, betainc)
from . import sort  # noqa: E402,F401  (sort, take_along, scatter_add_along, searchsorted)
from . import triangular  # noqa: E402,F401  (scipy.linalg's triangular_solve, lu)
from . import effects  # noqa: E402,F401  (check: tj.check's assertion)
