"""The public transforms: grad, value_and_grad, vjp, make_tape.

A transformed function flattens its arguments into leaves, looks up the tape for their
signature (pytree structure, leaf shapes/dtypes, static argument values), tracing and
differentiating on a miss, and runs the tape on the leaves. Called inside another transform's
trace (on tracers, or closing over them), it inlines its tape into that trace instead, which is
how `grad(grad(f))` and friends compose.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import threading
from typing import Any, Callable, Sequence

import numpy as np

from . import autodiff
from .avals import Aval, aval_of
from .errors import ArgumentError, DtypeError, at_source
from .interpret import inline, interpret
from .ir import Tape
from .passes import dce, optimize
from .pytree import TreeDef, flatten, leaf_paths, unflatten
from .trace import Tracer, current_trace, trace_to_tape

_SCALAR_DTYPES = {bool: np.dtype(np.bool_), int: np.dtype(np.int64), float: np.dtype(np.float64)}


def _leaf_aval(leaf: Any, where: str) -> tuple[Aval, bool]:
    """The aval of an argument leaf and whether it is weakly typed (a Python scalar)."""
    if isinstance(leaf, Tracer):
        return leaf.aval, leaf.weak
    if type(leaf) in _SCALAR_DTYPES:
        return Aval((), _SCALAR_DTYPES[type(leaf)]), True
    if isinstance(leaf, (np.ndarray, np.generic)):
        try:
            return aval_of(leaf), False
        except TypeError as err:
            raise DtypeError(f"{where}: {err}") from None
    raise ArgumentError(f"{where} is a {type(leaf).__name__}, not an array or a number. Pass "
                        f"arrays, numbers or pytrees of them (dict/list/tuple/namedtuple/"
                        f"dataclass), or mark the argument static with static_argnums.")


def _identifier(path: str) -> str:
    name = re.sub(r"\W", "_", path)
    return name if name[:1].isalpha() or name[:1] == "_" else f"a_{name}"


@dataclasses.dataclass
class _Args:
    """A call's arguments split into the leaves of the traced ones and the static rest."""

    args: tuple                 # all positional arguments as given
    dynamic: tuple[int, ...]    # positions of the traced arguments
    leaves: list[Any]
    treedefs: list[TreeDef]     # one per traced argument
    avals: list[Aval]
    weak: list[bool]
    names: list[str]

    def key(self, static: tuple) -> tuple:
        return (tuple(self.treedefs), tuple(self.avals), tuple(self.weak), static)

    def leaf_range(self, position: int) -> range:
        i = self.dynamic.index(position)
        start = sum(td.num_leaves for td in self.treedefs[:i])
        return range(start, start + self.treedefs[i].num_leaves)

    def rebuild(self, leaves: Sequence[Any]) -> list[Any]:
        full, it = list(self.args), iter(leaves)
        for pos, td in zip(self.dynamic, self.treedefs):
            full[pos] = unflatten(td, [next(it) for _ in range(td.num_leaves)])
        return full


def _parameter_names(fn: Callable[..., Any], count: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i in range(count):
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY,
                                                  params[i].POSITIONAL_OR_KEYWORD):
            names.append(params[i].name)
        else:
            star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), "arg")
            names.append(f"{star}{i}")
    return names


def split_args(fn: Callable[..., Any], args: tuple, kwargs: dict,
               static_argnums: tuple[int, ...]) -> tuple[_Args, tuple]:
    """Flatten the traced arguments; return them and the static arguments' key."""
    if kwargs:
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as err:
            raise ArgumentError(f"{getattr(fn, '__name__', fn)}: {err}") from None
        if bound.kwargs:
            raise ArgumentError(f"keyword-only arguments {sorted(bound.kwargs)} are not "
                                f"supported by tapejit transforms; pass them positionally")
        args = bound.args
    for i in static_argnums:
        if not -len(args) <= i < len(args):
            raise ArgumentError(f"static_argnums {i} is out of range for {len(args)} arguments")
    static_pos = {i % len(args) for i in static_argnums}
    try:
        static = tuple((i, args[i]) for i in sorted(static_pos))
        hash(static)
    except TypeError:
        raise ArgumentError("static arguments must be hashable (they are part of the cache "
                            "key); pass arrays as traced arguments") from None
    dynamic = tuple(i for i in range(len(args)) if i not in static_pos)
    names = _parameter_names(fn, len(args))
    leaves, treedefs, avals, weak, leaf_names = [], [], [], [], []
    for pos in dynamic:
        arg_leaves, td = flatten(args[pos])
        for leaf, path in zip(arg_leaves, leaf_paths(args[pos], names[pos])):
            aval, is_weak = _leaf_aval(leaf, f"argument {path}")
            avals.append(aval)
            weak.append(is_weak)
            leaf_names.append(_identifier(path))
        leaves += arg_leaves
        treedefs.append(td)
    return _Args(tuple(args), dynamic, leaves, treedefs, avals, weak, leaf_names), static


def _check_output(leaf: Any, fn: Callable[..., Any]) -> None:
    if not isinstance(leaf, (Tracer, np.ndarray, np.generic, bool, int, float)):
        raise ArgumentError(f"{getattr(fn, '__name__', 'function')} returned a "
                            f"{type(leaf).__name__}; a traced function must return arrays, "
                            f"numbers, or pytrees of them")


def trace_flat(fn: Callable[..., Any], call: _Args, has_aux: bool = False,
               ) -> tuple[Tape, TreeDef, TreeDef | None]:
    """Trace `fn` on the call's signature: a tape whose outputs are the leaves of fn's output
    (then of its aux output), and those two structures."""
    structure: dict[str, Any] = {}

    def flat_fn(tracers: Sequence[Tracer]) -> list[Any]:
        out = fn(*call.rebuild(tracers))
        aux = None
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise ArgumentError("with has_aux=True the function must return a pair "
                                    "(output, aux)")
            out, aux = out
        out_leaves, structure["out"] = flatten(out)
        aux_leaves, structure["aux"] = flatten(aux) if has_aux else ([], None)
        for leaf in out_leaves + aux_leaves:
            _check_output(leaf, fn)
        return out_leaves + aux_leaves

    tape = trace_to_tape(flat_fn, call.avals, call.names, call.weak)
    return dce(tape), structure["out"], structure["aux"]


def run(tape: Tape, leaves: Sequence[Any]) -> list[Any]:
    """Run a tape: interpret it on concrete values, or inline it into the open trace."""
    if current_trace() is not None:
        return inline(tape, leaves)
    return [o[()] if o.ndim == 0 else o for o in interpret(tape, leaves)]


def _normalize_argnums(argnums: int | Sequence[int], nargs: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for i in nums:
        if not -nargs <= i < nargs:
            raise ArgumentError(f"argnums {i} is out of range: the function was called with "
                                f"{nargs} positional argument(s)")
    return tuple(i % nargs for i in nums)


@dataclasses.dataclass(frozen=True)
class _GradProgram:
    tape: Tape
    aux: TreeDef | None


class _ValueAndGrad:
    """`value_and_grad(f)`: a callable with a per-signature cache of joint tapes."""

    def __init__(self, fn: Callable[..., Any], argnums: int | Sequence[int], has_aux: bool,
                 static_argnums: int | Sequence[int]) -> None:
        functools.update_wrapper(self, fn)
        self.fn, self.argnums, self.has_aux = fn, argnums, has_aux
        self.static_argnums = ((static_argnums,) if isinstance(static_argnums, int)
                               else tuple(static_argnums))
        self._cache: dict[tuple, _GradProgram] = {}
        self._lock = threading.Lock()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call, static = split_args(self.fn, args, kwargs, self.static_argnums)
        argnums = _normalize_argnums(self.argnums, len(call.args))
        if any(i not in call.dynamic for i in argnums):
            raise ArgumentError(f"argnums {self.argnums} and static_argnums "
                                f"{self.static_argnums} overlap")
        key = (argnums, *call.key(static))
        program = None if current_trace() is not None else self._cache.get(key)
        if program is None:
            program = self._build(call, argnums)
            if current_trace() is None:
                with self._lock:
                    self._cache[key] = program
        outs = run(program.tape, call.leaves)
        value, rest = outs[0], outs[1:]
        n_aux = len(rest) - sum(len(call.leaf_range(i)) for i in argnums)
        grads, it = [], iter(rest[n_aux:])
        for i in argnums:
            td = call.treedefs[call.dynamic.index(i)]
            grads.append(unflatten(td, [next(it) for _ in range(td.num_leaves)]))
        grad = grads[0] if isinstance(self.argnums, int) else tuple(grads)
        if self.has_aux:
            return (value, unflatten(program.aux, rest[:n_aux])), grad
        return value, grad

    def _build(self, call: _Args, argnums: tuple[int, ...]) -> _GradProgram:
        wrt = [j for i in argnums for j in call.leaf_range(i)]
        for j in wrt:
            if call.avals[j].dtype.kind != "f":
                raise DtypeError(
                    f"grad: argument {call.names[j]} has dtype {call.avals[j].dtype}; tapejit "
                    f"differentiates only floating-point inputs. Pass floats (e.g. "
                    f"np.float64(x) or x.astype(float)) or leave it out of argnums.")
        tape, out_td, aux_td = trace_flat(self.fn, call, self.has_aux)
        out = tape.outvars[0] if out_td.num_leaves == 1 else None
        if out is None or out.aval.shape != ():
            shown = out.aval if out is not None else f"a pytree {out_td}"
            raise ArgumentError(at_source(
                f"grad requires a function with a scalar output, but "
                f"{getattr(self.fn, '__name__', 'it')} returned {shown}. Reduce it to a scalar "
                f"(e.g. np.sum or np.mean), or use tj.vjp for vector outputs.",
                tape.eqns[-1].src if tape.eqns else None))
        if not out.aval.is_float:
            raise DtypeError(f"grad requires a floating-point output, got {out.aval}")
        seeds = [autodiff.ONE] + [None] * (len(tape.outvars) - 1)
        return _GradProgram(optimize(autodiff.vjp_tape(tape, wrt, seeds)), aux_td)


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0,
                   has_aux: bool = False, static_argnums: int | Sequence[int] = ()) -> Any:
    """`fn`'s value and its gradient with respect to the arguments `argnums`.

    Returns `(value, grad)`, or `((value, aux), grad)` with `has_aux`. `grad` has the structure,
    shapes and dtypes of the differentiated argument (a tuple of them if argnums is a tuple).
    """
    return _ValueAndGrad(fn, argnums, has_aux, static_argnums)


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
         static_argnums: int | Sequence[int] = ()) -> Callable[..., Any]:
    """The gradient of a scalar-valued `fn` with respect to its arguments `argnums`."""
    vg = _ValueAndGrad(fn, argnums, has_aux, static_argnums)

    @functools.wraps(fn)
    def gradient(*args: Any, **kwargs: Any) -> Any:
        (_, aux), g = vg(*args, **kwargs) if has_aux else ((None, None), vg(*args, **kwargs)[1])
        return (g, aux) if has_aux else g

    gradient.__wrapped_transform__ = vg  # type: ignore[attr-defined]
    return gradient


def vjp(fn: Callable[..., Any], *primals: Any, has_aux: bool = False) -> Any:
    """`(fn(*primals), vjp_fn)`, where `vjp_fn(ct)` returns one cotangent per primal for an
    output cotangent `ct` of the output's structure. With has_aux: `(out, vjp_fn, aux)`."""
    call, _ = split_args(fn, primals, {}, ())
    for j, aval in enumerate(call.avals):
        if aval.dtype.kind != "f":
            raise DtypeError(f"vjp: argument {call.names[j]} has dtype {aval.dtype}; tapejit "
                             f"differentiates only floating-point inputs")
    tape, out_td, aux_td = trace_flat(fn, call, has_aux)
    n_out = out_td.num_leaves
    seeds = [autodiff.INPUT if o.aval.is_float else None for o in tape.outvars[:n_out]]
    joint = optimize(autodiff.vjp_tape(tape, range(len(call.leaves)),
                                       seeds + [None] * (len(tape.outvars) - n_out)))
    outs = run(tape, call.leaves)
    out = unflatten(out_td, outs[:n_out])

    def vjp_fn(ct: Any) -> tuple:
        ct_leaves, ct_td = flatten(ct)
        if ct_td != out_td:
            raise ArgumentError(f"vjp_fn: the cotangent has structure {ct_td}, but the output "
                                f"has structure {out_td}")
        cts = []
        for leaf, var, seed in zip(ct_leaves, tape.outvars, seeds):
            if seed is None:
                continue
            if np.shape(leaf) != var.aval.shape:
                raise ArgumentError(f"vjp_fn: cotangent of shape {np.shape(leaf)} for an "
                                    f"output of shape {var.aval.shape}")
            cts.append(leaf if isinstance(leaf, Tracer) else np.asarray(leaf, var.aval.dtype))
        grads = run(joint, list(call.leaves) + cts)[len(tape.outvars):]
        return tuple(call.rebuild(grads)[i] for i in call.dynamic)

    if has_aux:
        return out, vjp_fn, unflatten(aux_td, outs[n_out:])
    return out, vjp_fn


def make_tape(fn: Callable[..., Any], static_argnums: int | Sequence[int] = ()) -> Callable:
    """`make_tape(f)(*args)` is the tape of `f` traced on those arguments (print it)."""
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fn)
    def make(*args: Any, **kwargs: Any) -> Tape:
        call, _ = split_args(fn, args, kwargs, static)
        return trace_flat(fn, call)[0]

    return make
