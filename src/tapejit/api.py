"""The public transforms: grad, value_and_grad, jit, vjp, make_tape.

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
from typing import Any, Callable, Sequence

import numpy as np

from . import autodiff, guards
from .avals import Aval, aval_of
from .errors import ArgumentError, ConcretizationError, DtypeError, at_source
from .compile import executable
from .cuda_support import device_aval, is_device_array
from .dispatch import (CachedTransform, Program, check_backend, default_backend, getter, run,
                       unbox, unbox_traced)
from .ir import Tape
from .passes import dce, optimize
from .pytree import TreeDef, flatten, leaf_paths, unflatten
from .trace import Tracer, current_trace, trace_to_tape, user_source

_SCALAR_DTYPES = {bool: np.dtype(np.bool_), int: np.dtype(np.int64), float: np.dtype(np.float64)}


def _leaf_aval(leaf: Any, where: str) -> tuple[Aval, bool]:
    """The aval of an argument leaf and whether it is weakly typed (a Python scalar)."""
    if isinstance(leaf, Tracer):
        return leaf.aval, leaf.weak
    if type(leaf) in _SCALAR_DTYPES:
        return Aval((), _SCALAR_DTYPES[type(leaf)]), True
    if isinstance(leaf, (np.ndarray, np.generic)) or is_device_array(leaf):
        refuse_subclass(leaf, where)
        try:
            if is_device_array(leaf):   # the CUDA backend's
                return device_aval(leaf), False
            return aval_of(leaf), False
        except TypeError as err:
            raise DtypeError(at_source(f"{where}: {err}", user_source(1))) from None
    raise ArgumentError(at_source(
        f"{where} is a {type(leaf).__name__}, not an array or a number. Pass arrays, numbers "
        f"or pytrees of them (dict/list/tuple/namedtuple/dataclass), or mark the argument "
        f"static with static_argnums.", user_source(1)))


def refuse_subclass(leaf: Any, where: str) -> None:
    """Raise for an ndarray subclass whose meaning a plain array would lose (a masked array's
    mask, np.matrix's `*`, a unit): tapejit computes with plain ndarrays. np.memmap is one."""
    if isinstance(leaf, np.ndarray) and type(leaf) is not np.ndarray and \
            not isinstance(leaf, np.memmap):
        raise ArgumentError(at_source(
            f"{where} is a {type(leaf).__module__}.{type(leaf).__name__} of shape "
            f"{leaf.shape}, an ndarray subclass: tapejit computes with plain arrays, so what "
            f"the subclass adds would be lost silently (a masked array's mask, np.matrix's `*` "
            f"as a matrix product). Pass a plain array: x.filled(fill) or x.compressed() for a "
            f"masked array, np.asarray(x) for a matrix (and `@` for its products), or "
            f"np.asarray(x) in general.", user_source(1)))


def _identifier(path: str) -> str:
    name = re.sub(r"\W", "_", path)
    return name if name[:1].isalpha() or name[:1] == "_" else f"a_{name}"


@dataclasses.dataclass
class _Args:
    """A call's arguments split into the leaves of the traced ones and the static rest. When the
    call passes keyword arguments that cannot go positionally, their dict is one more (traced)
    argument after the `n_pos` positional ones."""

    args: tuple                 # all positional arguments as given (then the keyword dict)
    n_pos: int                  # how many of `args` are positional
    dynamic: tuple[int, ...]    # positions of the traced arguments
    leaves: list[Any]
    treedefs: list[TreeDef]     # one per traced argument
    avals: list[Aval]
    weak: list[bool]
    names: list[str]

    def key(self, static: tuple) -> tuple:
        return (tuple(self.treedefs), tuple(self.avals), tuple(self.weak), static, self.n_pos)

    def leaf_range(self, position: int) -> range:
        i = self.dynamic.index(position)
        start = sum(td.num_leaves for td in self.treedefs[:i])
        return range(start, start + self.treedefs[i].num_leaves)

    def rebuild(self, leaves: Sequence[Any]) -> list[Any]:
        full, it = list(self.args), iter(leaves)
        for pos, td in zip(self.dynamic, self.treedefs):
            full[pos] = unflatten(td, [next(it) for _ in range(td.num_leaves)])
        return full

    def call(self, fn: Callable[..., Any], leaves: Sequence[Any]) -> Any:
        """`fn` applied to the arguments with these leaves in place of the traced ones."""
        full = self.rebuild(leaves)
        return fn(*full[:self.n_pos], **(full[self.n_pos] if len(full) > self.n_pos else {}))


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


def _fn_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _bind(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """Positional arguments and the keyword arguments that cannot be passed positionally."""
    if not kwargs:
        return args, {}
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as err:
        raise ArgumentError(at_source(f"{_fn_name(fn)}: {err}", user_source(1))) from None
    return bound.args, bound.kwargs


def _static_positions(args: tuple, static_argnums: tuple[int, ...]) -> tuple[set[int], tuple]:
    """The positions of the static arguments, and their part of the cache key."""
    for i in static_argnums:
        if not -len(args) <= i < len(args):
            raise ArgumentError(at_source(f"static_argnums {i} is out of range for "
                                          f"{len(args)} positional argument(s)", user_source(1)))
    positions = {i % len(args) for i in static_argnums}
    for i in sorted(positions):
        try:
            hash(args[i])
        except TypeError:
            raise ArgumentError(at_source(
                f"static argument {i} is an unhashable {type(args[i]).__name__}: static "
                f"arguments are part of the cache key, so they must be hashable (use a tuple "
                f"instead of a list), or pass arrays as traced arguments", user_source(1))
                ) from None
    return positions, tuple((i, type(args[i]), args[i]) for i in sorted(positions))


def split_args(fn: Callable[..., Any], args: tuple, kwargs: dict,
               static_argnums: tuple[int, ...]) -> tuple[_Args, tuple]:
    """Flatten the traced arguments; return them and the static arguments' key."""
    args, extra = _bind(fn, args, kwargs)
    static_pos, static = _static_positions(args, static_argnums)
    n_pos = len(args)
    dynamic = tuple(i for i in range(n_pos) if i not in static_pos) + ((n_pos,) if extra else ())
    names = _parameter_names(fn, n_pos) + [""]
    full = tuple(args) + ((extra,) if extra else ())
    leaves, treedefs, avals, weak, leaf_names = [], [], [], [], []
    for pos in dynamic:
        arg_leaves, td = flatten(full[pos])
        for leaf, path in zip(arg_leaves, leaf_paths(full[pos], names[pos])):
            path = path[1:] if pos == n_pos else path  # a keyword's path is "_<name>"
            aval, is_weak = _leaf_aval(leaf, f"argument {path}")
            avals.append(aval)
            weak.append(is_weak)
            leaf_names.append(_identifier(path))
        leaves += arg_leaves
        treedefs.append(td)
    call = _Args(full, n_pos, dynamic, leaves, treedefs, avals, weak, leaf_names)
    return call, static


def _fn_source(fn: Callable[..., Any]) -> tuple[str, int] | None:
    """Where `fn` is defined (for errors about what it returned)."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else None


def _check_output(leaf: Any, fn: Callable[..., Any]) -> None:
    if not isinstance(leaf, (Tracer, np.ndarray, np.generic, bool, int, float)):
        raise ArgumentError(at_source(
            f"{_fn_name(fn)} returned a {type(leaf).__name__} ({leaf!r:.40}); a traced "
            f"function must return arrays, numbers, or pytrees of them", _fn_source(fn)))


def _call_traced(fn: Callable[..., Any], call: _Args, tracers: Sequence[Tracer]) -> Any:
    try:
        return call.call(fn, tracers)
    except ValueError as err:
        # numpy's `array[i] = tracer` turns the tracer's ConcretizationError into a ValueError
        if isinstance(err.__cause__, ConcretizationError):
            raise ConcretizationError(
                f"Assigning a traced value into a numpy array (e.g. `out = np.zeros(3); "
                f"out[0] = traced`; create `out` with np.zeros_like(x) instead): "
                f"{err.__cause__}") from None
        raise


def trace_flat(fn: Callable[..., Any], call: _Args, has_aux: bool = False,
               ) -> tuple[Tape, TreeDef, TreeDef | None]:
    """Trace `fn` on the call's signature: a tape whose outputs are the leaves of fn's output
    (then of its aux output), and those two structures."""
    structure: dict[str, Any] = {}

    def flat_fn(tracers: Sequence[Tracer]) -> list[Any]:
        out = _call_traced(fn, call, tracers)
        aux = None
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise ArgumentError(at_source(
                    f"with has_aux=True the function must return a pair (output, aux), but "
                    f"{_fn_name(fn)} returned a {type(out).__name__}", _fn_source(fn)))
            out, aux = out
        out_leaves, structure["out"] = flatten(out)
        aux_leaves, structure["aux"] = flatten(aux) if has_aux else ([], None)
        for leaf in out_leaves + aux_leaves:
            _check_output(leaf, fn)
        return out_leaves + aux_leaves

    generators = guards.generator_states(fn)
    tape = trace_to_tape(flat_fn, call.avals, call.names, call.weak)
    guards.check_generators(generators, _fn_name(fn), _fn_source(fn))
    return dce(tape), structure["out"], structure["aux"]


def _normalize_argnums(argnums: int | Sequence[int], nargs: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, (int, np.integer)) else tuple(argnums)
    for i in nums:
        if not isinstance(i, (int, np.integer)) or not -nargs <= i < nargs:
            raise ArgumentError(at_source(
                f"argnums {i!r} is out of range: the function was called with {nargs} "
                f"positional argument(s)", user_source(1)))
    return tuple(int(i) % nargs for i in nums)


class _ValueAndGrad(CachedTransform):
    """`value_and_grad(f)` (and, with `grad_only`, `grad(f)`): a callable with a per-signature
    cache of joint programs."""

    def __init__(self, fn: Callable[..., Any], argnums: int | Sequence[int], has_aux: bool,
                 static_argnums: int | Sequence[int], backend: str | None = None,
                 grad_only: bool = False) -> None:
        super().__init__(fn, static_argnums, backend)
        self.argnums, self.has_aux, self.grad_only = argnums, has_aux, grad_only

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(args, kwargs)

    def _signature(self, args: tuple, kwargs: dict) -> tuple[_Args, tuple, Callable]:
        return argnums_signature(self, args, kwargs)

    def _finisher(self, program: Program, call: _Args, traced: bool) -> Callable:
        argnums = _normalize_argnums(self.argnums, call.n_pos)
        n_aux = program.aux.num_leaves if self.has_aux else 0
        ranges = [call.leaf_range(i) for i in argnums]
        treedefs = [call.treedefs[call.dynamic.index(i)] for i in argnums]
        # the gradient of an ndarray argument is an ndarray, also when it is 0-d
        keep = [False] * (1 + n_aux) + [isinstance(call.leaves[j], np.ndarray)
                                         for r in ranges for j in r]
        single = isinstance(self.argnums, (int, np.integer))
        aux_td, grad_only, has_aux = program.aux, self.grad_only, self.has_aux
        if single and not has_aux and not traced and treedefs[0].kind == "leaf":
            grad = getter(program.tape, 1, keep[1])       # the common case, precomputed
            if grad_only:
                return grad
            value = getter(program.tape, 0)
            return lambda outs: (value(outs), grad(outs))
        outs_of = unbox_traced(keep) if traced else unbox(program.tape, keep)

        def finish(outs: Sequence[Any]) -> Any:
            outs = outs_of(outs)
            grads, start = [], 1 + n_aux
            for r, td in zip(ranges, treedefs):
                grads.append(outs[start] if td.kind == "leaf" else
                             unflatten(td, outs[start:start + len(r)]))
                start += len(r)
            grad = grads[0] if single else tuple(grads)
            if has_aux:
                aux = unflatten(aux_td, outs[1:1 + n_aux])
                return (grad, aux) if grad_only else ((outs[0], aux), grad)
            return grad if grad_only else (outs[0], grad)

        return finish

    def _build(self, call: _Args, argnums: tuple[int, ...]) -> Program:
        wrt = [j for i in argnums for j in call.leaf_range(i)]
        _check_float_inputs("grad", call, wrt)
        tape, out_td, aux_td = trace_flat(self.fn, call, self.has_aux)
        out = tape.outvars[0] if out_td.num_leaves == 1 else None
        if out is None or out.aval.shape != ():
            shown = (out.aval if out is not None else "None (is a `return` missing?)"
                     if out_td.kind == "none" else f"a pytree {out_td}")
            src = tape.eqns[-1].src if out is not None and tape.eqns else _fn_source(self.fn)
            raise ArgumentError(at_source(
                f"grad requires a function with a scalar output, but {_fn_name(self.fn)} "
                f"returned {shown}. Reduce it to a scalar (e.g. np.sum or np.mean), or use "
                f"tj.vjp for vector outputs.", src))
        if not out.aval.is_float:
            raise DtypeError(at_source(f"grad requires a floating-point output, but "
                                       f"{_fn_name(self.fn)} returned {out.aval}",
                                       _fn_source(self.fn)))
        seeds = [autodiff.ONE] + [None] * (len(tape.outvars) - 1)
        return Program(optimize(autodiff.vjp_tape(tape, wrt, seeds)), aux_td)


def argnums_signature(transform: Any, args: tuple, kwargs: dict) -> tuple[_Args, tuple, Callable]:
    """`CachedTransform._signature` of a transform differentiating w.r.t. `transform.argnums`
    (its key starts with them; its program is `transform._build(call, argnums)`)."""
    call, static = split_args(transform.fn, args, kwargs, transform.static_argnums)
    argnums = _normalize_argnums(transform.argnums, call.n_pos)
    if any(i not in call.dynamic for i in argnums):
        raise ArgumentError(at_source(f"argnums {transform.argnums} and static_argnums "
                                      f"{transform.static_argnums} overlap", user_source(2)))
    return call, (argnums, *call.key(static)), lambda: transform._build(call, argnums)


def _check_float_inputs(what: str, call: _Args, wrt: Sequence[int]) -> None:
    for j in wrt:
        if call.avals[j].dtype.kind != "f":
            raise DtypeError(at_source(
                f"{what}: argument {call.names[j]} has dtype {call.avals[j].dtype}; tapejit "
                f"differentiates only floating-point inputs. Pass floats (e.g. np.float64(x) "
                f"or x.astype(float)), or leave it out of argnums (for tj.vjp, close over it "
                f"with functools.partial).", user_source(1)))


def _like(grad: Any, leaf: Any) -> Any:
    """A gradient as an ndarray where the argument was one (interpret returns 0-d as scalars)."""
    return np.asarray(grad) if isinstance(leaf, np.ndarray) and not isinstance(
        grad, Tracer) else grad


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0,
                   has_aux: bool = False, static_argnums: int | Sequence[int] = (),
                   backend: str | None = None) -> Any:
    """`fn`'s value and its gradient with respect to the arguments `argnums`.

    Returns `(value, grad)`, or `((value, aux), grad)` with `has_aux`. `grad` has the structure,
    shapes and dtypes of the differentiated argument (a tuple of them if argnums is a tuple).
    `backend`: "interpret" (numpy, the default for now) or "numba" (compiled).
    """
    return _ValueAndGrad(fn, argnums, has_aux, static_argnums, backend)


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
         static_argnums: int | Sequence[int] = (), backend: str | None = None
         ) -> Callable[..., Any]:
    """The gradient of a scalar-valued `fn` with respect to its arguments `argnums`
    (`(grad, aux)` with has_aux)."""
    vg = _ValueAndGrad(fn, argnums, has_aux, static_argnums, backend, grad_only=True)
    call = vg._call

    @functools.wraps(fn)
    def gradient(*args: Any, **kwargs: Any) -> Any:
        return call(args, kwargs)

    gradient.__wrapped_transform__ = vg  # type: ignore[attr-defined]
    gradient.cache_info = vg.cache_info  # type: ignore[attr-defined]
    return gradient


class _Jit(CachedTransform):
    """`jit(f)`: a callable with a per-signature cache of forward programs."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(args, kwargs)

    def _signature(self, args: tuple, kwargs: dict) -> tuple[_Args, tuple, Callable]:
        call, static = split_args(self.fn, args, kwargs, self.static_argnums)
        return call, ((), *call.key(static)), lambda: self._build(call)

    def _build(self, call: _Args) -> Program:
        tape, out_td, _ = trace_flat(self.fn, call)
        return Program(optimize(tape), None, out=out_td)

    def _finisher(self, program: Program, call: _Args, traced: bool) -> Callable:
        keep = [False] * len(program.tape.outvars)
        outs_of = unbox_traced(keep) if traced else unbox(program.tape, keep)
        out_td = program.out
        assert out_td is not None
        if out_td.kind == "leaf":
            return getter(program.tape, 0) if not traced else lambda outs: outs_of(outs)[0]
        return lambda outs: unflatten(out_td, outs_of(outs))


def jit(fn: Callable[..., Any], static_argnums: int | Sequence[int] = (),
        backend: str | None = None) -> Callable[..., Any]:
    """`fn` compiled: traced once per signature (pytree structure, leaf shapes and dtypes,
    static argument values), optimized and run on `backend` ("interpret" or "numba"; default
    TAPEJIT_BACKEND). Returns what `fn` returns (0-d results as numpy scalars). Python scalar
    arguments are run-time values; `static_argnums` makes arguments part of the cache key
    (Python control flow may depend on them). Called inside another transform (`grad(jit(f))`)
    it inlines its tape; `jit(grad(f))` compiles the gradient program."""
    return _Jit(fn, static_argnums, backend)


def vjp(fn: Callable[..., Any], *primals: Any, has_aux: bool = False,
        backend: str | None = None) -> Any:
    """`(fn(*primals), vjp_fn)`, where `vjp_fn(ct)` returns one cotangent per primal for an
    output cotangent `ct` of the output's structure. With has_aux: `(out, vjp_fn, aux)`.
    The forward tape and the joint (reverse) tape run on `backend` ("interpret" or "numba";
    default TAPEJIT_BACKEND)."""
    check_backend(backend)
    call, _ = split_args(fn, primals, {}, ())
    _check_float_inputs("vjp", call, range(len(call.leaves)))
    tape, out_td, aux_td = trace_flat(fn, call, has_aux)
    n_out = out_td.num_leaves
    seeds = [autodiff.INPUT if o.aval.is_float else None for o in tape.outvars[:n_out]]
    joint = optimize(autodiff.vjp_tape(tape, range(len(call.leaves)),
                                       seeds + [None] * (len(tape.outvars) - n_out)))
    chosen = default_backend(backend)
    outs = run(tape, call.leaves, _executable(tape, chosen))
    out = unflatten(out_td, outs[:n_out])
    joint_program: list[Any] = []    # made on the first call of vjp_fn

    def vjp_fn(ct: Any) -> tuple:
        ct_leaves, ct_td = flatten(ct)
        if ct_td != out_td:
            raise ArgumentError(at_source(f"vjp_fn: the cotangent has structure {ct_td}, but "
                                          f"the output has structure {out_td}", user_source(1)))
        cts = []
        for leaf, var, seed in zip(ct_leaves, tape.outvars, seeds):
            if seed is None:
                continue
            if np.shape(leaf) != var.aval.shape:
                raise ArgumentError(at_source(
                    f"vjp_fn: cotangent of shape {np.shape(leaf)} for an output of shape "
                    f"{var.aval.shape}", user_source(1)))
            cts.append(leaf if isinstance(leaf, Tracer) else np.asarray(leaf, var.aval.dtype))
        if not joint_program:
            joint_program.append(_executable(joint, chosen))
        grads = run(joint, list(call.leaves) + cts, joint_program[0])[len(tape.outvars):]
        grads = [_like(g, leaf) for g, leaf in zip(grads, call.leaves)]
        return tuple(call.rebuild(grads)[i] for i in call.dynamic)

    if has_aux:
        return out, vjp_fn, unflatten(aux_td, outs[n_out:])
    return out, vjp_fn


def _executable(tape: Tape, backend: str) -> Any:
    """How `run` runs `tape` on `backend` (the interpreter: None); nothing inside a trace."""
    if backend == "interpret" or current_trace() is not None:
        return None
    return executable(optimize(tape), backend)


def make_tape(fn: Callable[..., Any], static_argnums: int | Sequence[int] = ()) -> Callable:
    """`make_tape(f)(*args)` is the tape of `f` traced on those arguments (print it)."""
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fn)
    def make(*args: Any, **kwargs: Any) -> Tape:
        call, _ = split_args(fn, args, kwargs, static)
        return trace_flat(fn, call)[0]

    return make
