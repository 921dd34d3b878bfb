"""The public transforms: grad, value_and_grad, jit, make_tape.

A transformed function flattens its arguments into leaves, looks up the tape for their
signature (pytree structure, leaf shapes/dtypes, static argument values), tracing and
differentiating on a miss, and runs the tape on the leaves. Called inside another transform's
trace (on tracers, or closing over them), it inlines its tape into that trace instead, which is
how `grad(grad(f))` and friends compose.

In the layers: each transform is a record (transforms/record.py) that the one cache
(transforms/cached.py) runs and the one builder (transforms/builder.py) makes programs of;
what each returns is put together here (the finishers). jacobians.py (jacrev, jacfwd,
hessian, jvp), split.py (vjp, linearize) and vmap.py are beside it; explain.py and
gradient_tape.py sit on top.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from . import autodiff
from .transforms.arguments import (CacheKey, CallArgs, argnums_signature, check_argnums,
                                   check_float_inputs, normalize_argnums, split_args,
                                   static_argnums_of)
from .ir import Tape
from .transforms.traced import require_scalar_float, trace_flat
from .pytree import unflatten
from .transforms.cached import CachedTransform
from .transforms.outputs import as_output_tree, getter, unboxing
from .transforms.record import Specialization, Traced, Transform


def _trace_gradient(t: CachedTransform, call: CallArgs, key: CacheKey) -> Traced:
    """`t.fn` traced on the call, refused unless its first output is a float scalar (or what
    `t.check_output` allows: tj.explain's message) and the arguments `argnums` are floats."""
    check_float_inputs(t.transform, call, _wrt(call, key.options))
    tape, out_td, aux_td = trace_flat(t.fn, call, t.has_aux)
    getattr(t, "check_output", require_scalar_float)(t.fn, tape, out_td)
    return Traced(tape, out_td, aux_td)


def _wrt(call: CallArgs, argnums: Sequence[int]) -> list[int]:
    return [j for i in argnums for j in call.leaf_range(i)]


def _joint(t: CachedTransform, call: CallArgs, key: CacheKey, traced: Traced) -> Traced:
    """Reverse mode: the joint tape of values, then gradients w.r.t. the arguments argnums."""
    seeds = [autodiff.ONE] + [None] * (len(traced.tape.outvars) - 1)
    joint = autodiff.vjp_tape(traced.tape, _wrt(call, key.options), seeds)
    return traced._replace(tape=joint)


def _finish_gradient(t: CachedTransform, program: Specialization, call: CallArgs,
                     traced: bool) -> Callable:
    argnums = normalize_argnums(t.argnums, call.n_pos)
    n_aux = program.aux.num_leaves if t.has_aux else 0
    ranges = [call.leaf_range(i) for i in argnums]
    treedefs = [call.treedefs[call.dynamic.index(i)] for i in argnums]
    # the gradient of an ndarray argument is an ndarray, also when it is 0-d
    keep = [False] * (1 + n_aux) + [isinstance(call.leaves[j], np.ndarray)
                                     for r in ranges for j in r]
    single = isinstance(t.argnums, (int, np.integer))
    aux_td, grad_only, has_aux = program.aux, t.grad_only, t.has_aux
    if single and not has_aux and not traced and treedefs[0].kind == "leaf":
        grad = getter(program.tape, 1, keep[1])       # the common case, precomputed
        if grad_only:
            return grad
        value = getter(program.tape, 0)
        return lambda outs: (value(outs), grad(outs))
    outs_of = unboxing(program.tape, keep, traced)

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


def _gradient_how(t: CachedTransform, call: CallArgs, key: CacheKey, traced: Traced) -> tuple:
    return ("gradient", tuple(_wrt(call, key.options)))


def _forward_how(t: CachedTransform, call: CallArgs, key: CacheKey, traced: Traced) -> tuple:
    return ("forward",)


VALUE_AND_GRAD = Transform("value_and_grad", argnums_signature, _finish_gradient, _joint,
                           "autodiff", _trace_gradient, _gradient_how, shared=True)
GRAD = VALUE_AND_GRAD._replace(name="grad")


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0,
                   has_aux: bool = False, static_argnums: int | Sequence[int] = (),
                   backend: str | None = None, static_argnames: str | Sequence[str] = ()) -> Any:
    """`fn`'s value and its gradient with respect to the arguments `argnums`.

    Returns `(value, grad)`, or `((value, aux), grad)` with `has_aux`. `grad` has the structure,
    shapes and dtypes of the differentiated argument (a tuple of them if argnums is a tuple).
    `backend`: "numba" (compiled; the default, or TAPEJIT_BACKEND), "interpret" (numpy) or
    "cuda".
    """
    return _gradient(VALUE_AND_GRAD, fn, argnums, has_aux, static_argnums, backend,
                     static_argnames)


def _gradient(record: Transform, fn: Callable[..., Any], argnums: int | Sequence[int],
              has_aux: bool, static_argnums: int | Sequence[int], backend: str | None,
              static_argnames: str | Sequence[str]) -> CachedTransform:
    return CachedTransform(record, fn, static_argnums, backend,
                           static_argnames=static_argnames,
                           argnums=check_argnums(argnums, record.name), has_aux=has_aux,
                           grad_only=record is GRAD)


def grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
         static_argnums: int | Sequence[int] = (), backend: str | None = None,
         static_argnames: str | Sequence[str] = ()) -> Callable[..., Any]:
    """The gradient of a scalar-valued `fn` with respect to its arguments `argnums`
    (`(grad, aux)` with has_aux)."""
    vg = _gradient(GRAD, fn, argnums, has_aux, static_argnums, backend, static_argnames)
    call = vg._call

    @functools.wraps(fn)
    def gradient(*args: Any, **kwargs: Any) -> Any:
        return call(args, kwargs)

    gradient.__wrapped_transform__ = vg  # type: ignore[attr-defined]
    gradient.cache_info = vg.cache_info  # type: ignore[attr-defined]
    return gradient


def _jit_signature(t: CachedTransform, args: tuple, kwargs: dict) -> tuple[CallArgs, CacheKey]:
    call, static = split_args(t.fn, args, kwargs, t.static_argnums)
    return call, call.key(static)


JIT = Transform("jit", _jit_signature, as_output_tree, how=_forward_how, shared=True)


def jit(fn: Callable[..., Any], static_argnums: int | Sequence[int] = (),
        backend: str | None = None, static_argnames: str | Sequence[str] = ()
        ) -> Callable[..., Any]:
    """`fn` compiled: traced once per signature (pytree structure, leaf shapes and dtypes,
    static argument values), optimized and run on `backend` ("numba", "interpret" or "cuda";
    default TAPEJIT_BACKEND, else "numba"). Returns what `fn` returns (0-d results as numpy
    scalars). Python scalar arguments are run-time values; `static_argnums` (and
    `static_argnames`, by parameter name) make arguments part of the cache key (Python control
    flow may depend on them). Called inside another transform (`grad(jit(f))`) it inlines its
    tape; `jit(grad(f))` compiles the gradient program."""
    return CachedTransform(JIT, fn, static_argnums, backend, static_argnames=static_argnames)


def make_tape(fn: Callable[..., Any], static_argnums: int | Sequence[int] = (),
              static_argnames: str | Sequence[str] = ()) -> Callable:
    """`make_tape(f)(*args)` is the tape of `f` traced on those arguments (print it)."""
    static = static_argnums_of(fn, static_argnums, static_argnames)

    @functools.wraps(fn)
    def make(*args: Any, **kwargs: Any) -> Tape:
        call, _ = split_args(fn, args, kwargs, static)
        return trace_flat(fn, call)[0]

    return make
