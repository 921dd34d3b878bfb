"""The public transforms: grad, value_and_grad, jit, make_tape.

A transformed function flattens its arguments into leaves, looks up the tape for their
signature (pytree structure, leaf shapes/dtypes, static argument values), tracing and
differentiating on a miss, and runs the tape on the leaves. Called inside another transform's
trace (on tracers, or closing over them), it inlines its tape into that trace instead, which is
how `grad(grad(f))` and friends compose.

In the layers: the transforms are `CachedTransform`s (dispatch.py) whose programs programs.py
builds from the arguments arguments.py splits; what each returns is put together here (the
finishers). transforms.py (jacobians, hessian, jvp, vjp, linearize) is beside it; explain.py
and gradient_tape.py sit on top.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from .arguments import (CallArgs, argnums_signature, check_argnums, normalize_argnums,
                        split_args)
from .dispatch import (CachedTransform, Specialization, as_output_tree, getter, unbox,
                       unbox_traced)
from .ir import Tape
from .programs import forward_program, gradient_program, trace_flat
from .pytree import unflatten


class _ValueAndGrad(CachedTransform):
    """`value_and_grad(f)` (and, with `grad_only`, `grad(f)`): a callable with a per-signature
    cache of joint programs."""

    def __init__(self, fn: Callable[..., Any], argnums: int | Sequence[int], has_aux: bool,
                 static_argnums: int | Sequence[int], backend: str | None = None,
                 grad_only: bool = False) -> None:
        super().__init__(fn, static_argnums, backend, "grad" if grad_only else "value_and_grad")
        self.argnums = check_argnums(argnums, self.transform)
        self.has_aux, self.grad_only = has_aux, grad_only
        self._share(self.argnums, has_aux)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(args, kwargs)

    def _signature(self, args: tuple, kwargs: dict) -> tuple[CallArgs, tuple, Callable]:
        call, key, argnums = argnums_signature(self, args, kwargs)
        return call, key, lambda: self._build(call, argnums)

    def _build(self, call: CallArgs, argnums: tuple[int, ...]) -> Specialization:
        tape, aux_td = gradient_program(self.fn, call, argnums, self.has_aux)
        return Specialization(tape, aux_td)

    def _finisher(self, program: Specialization, call: CallArgs, traced: bool) -> Callable:
        argnums = normalize_argnums(self.argnums, call.n_pos)
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


def value_and_grad(fn: Callable[..., Any], argnums: int | Sequence[int] = 0,
                   has_aux: bool = False, static_argnums: int | Sequence[int] = (),
                   backend: str | None = None) -> Any:
    """`fn`'s value and its gradient with respect to the arguments `argnums`.

    Returns `(value, grad)`, or `((value, aux), grad)` with `has_aux`. `grad` has the structure,
    shapes and dtypes of the differentiated argument (a tuple of them if argnums is a tuple).
    `backend`: "numba" (compiled; the default, or TAPEJIT_BACKEND), "interpret" (numpy) or
    "cuda".
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

    def __init__(self, fn: Callable[..., Any], static_argnums: int | Sequence[int],
                 backend: str | None) -> None:
        super().__init__(fn, static_argnums, backend)
        self._share()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(args, kwargs)

    def _signature(self, args: tuple, kwargs: dict) -> tuple[CallArgs, tuple, Callable]:
        call, static = split_args(self.fn, args, kwargs, self.static_argnums)
        return call, ((), *call.key(static)), lambda: self._build(call)

    def _build(self, call: CallArgs) -> Specialization:
        tape, out_td = forward_program(self.fn, call)
        return Specialization(tape, None, out=out_td)

    def _finisher(self, program: Specialization, call: CallArgs, traced: bool) -> Callable:
        return as_output_tree(program, traced)


def jit(fn: Callable[..., Any], static_argnums: int | Sequence[int] = (),
        backend: str | None = None) -> Callable[..., Any]:
    """`fn` compiled: traced once per signature (pytree structure, leaf shapes and dtypes,
    static argument values), optimized and run on `backend` ("numba", "interpret" or "cuda";
    default TAPEJIT_BACKEND, else "numba"). Returns what `fn` returns (0-d results as numpy
    scalars). Python scalar arguments are run-time values; `static_argnums` makes arguments
    part of the cache key (Python control flow may depend on them). Called inside another
    transform (`grad(jit(f))`) it inlines its tape; `jit(grad(f))` compiles the gradient
    program."""
    return _Jit(fn, static_argnums, backend)


def make_tape(fn: Callable[..., Any], static_argnums: int | Sequence[int] = ()) -> Callable:
    """`make_tape(f)(*args)` is the tape of `f` traced on those arguments (print it)."""
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    @functools.wraps(fn)
    def make(*args: Any, **kwargs: Any) -> Tape:
        call, _ = split_args(fn, args, kwargs, static)
        return trace_flat(fn, call)[0]

    return make
