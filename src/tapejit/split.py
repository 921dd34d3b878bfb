"""vjp and linearize: two programs each, one computing the outputs and the residuals once,
the other (transforms/residuals.py's second half) running on them as often as it is called.

The record's tape transform is reverse mode (`vjp`) or the JVP tape (`linearize`), cut by
`derived_tapes.split_known` at the cotangents or tangents: `vjp_fn` and `f_jvp` run only the
part that reads them, on the stored residuals.

In the layers: beside api.py and jacobians.py, on the transforms package.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import autodiff
from .transforms.arguments import CacheKey, CallArgs, check_float_inputs, split_args
from .derived_tapes import jvp_tape, split_known
from .errors import ArgumentError, at_source, user_source
from .jacobians import tangent_leaves
from .pytree import flatten, unflatten
from .trace import Tracer
from .transforms.cached import CachedTransform, transform_of
from .transforms.outputs import unboxing
from .transforms.record import Specialization, Traced, Transform


def _split_signature(t: CachedTransform, args: tuple, kwargs: dict
                     ) -> tuple[CallArgs, CacheKey]:
    call, static = split_args(t.fn, args, kwargs, ())
    if t.record.name == "vjp":
        check_float_inputs("vjp", call, range(len(call.leaves)))
    return call, call.key(static)


def _halves(t: CachedTransform, call: CallArgs, key: CacheKey, traced: Traced) -> Traced:
    """The program of the outputs, the aux leaves and the residuals; and the second half."""
    tape, n_out = traced.tape, traced.out.num_leaves
    n_in, n_all = len(tape.invars), len(tape.outvars)
    if t.record.name == "vjp":
        seeds = [autodiff.INPUT if o.aval.is_float else None for o in tape.outvars[:n_out]]
        full = autodiff.vjp_tape(tape, range(n_in), seeds + [None] * (n_all - n_out))
    else:
        full = jvp_tape(tape, n_out)
    first, second, from_inputs = split_known(full, n_in, n_all)
    return traced._replace(tape=first, second=second, from_inputs=from_inputs)


def _finish_split(t: CachedTransform, program: Specialization, call: CallArgs,
                  traced: bool) -> Callable:
    second, from_inputs = program.second, program.from_inputs
    out_td, aux_td = program.out, program.aux
    n_out = out_td.num_leaves
    n_aux = aux_td.num_leaves if t.has_aux else 0
    keep = [k >= n_out + n_aux for k in range(len(program.tape.outvars))]
    outs_of = unboxing(program.tape, keep, traced)
    out_avals = [o.aval for o in program.tape.outvars[:n_out]]
    make = _vjp_fn if t.record.name == "vjp" else _linear_fn
    has_aux = t.has_aux

    def finish(outs: Sequence[Any]) -> Any:
        outs = outs_of(outs)
        # inputs are kept as they are now: a caller may change its arrays in place later
        saved = [np.array(call.leaves[j]) if isinstance(call.leaves[j], np.ndarray)
                 else call.leaves[j] for j in from_inputs] + outs[n_out + n_aux:]
        result = (unflatten(out_td, outs[:n_out]),
                  make(second, saved, call, out_td, out_avals))
        return (*result, unflatten(aux_td, outs[n_out:n_out + n_aux])) if has_aux \
            else result

    return finish


# no fast path: the result keeps the input leaves that are residuals
def _split_how(t: CachedTransform, call: CallArgs, key: CacheKey, traced: Traced) -> tuple:
    return (t.record.name, traced.out.num_leaves)


VJP = Transform("vjp", _split_signature, _finish_split, _halves, "autodiff", how=_split_how,
                fast_path=False, residuals=True)
LINEARIZE = VJP._replace(name="linearize", stage="jvp")


def _vjp_fn(second: CachedTransform, saved: list[Any], call: Any, out_td: Any,
            out_avals: Sequence[Any]) -> Callable[[Any], tuple]:
    """`vjp`'s `vjp_fn`: the reverse sweep on the saved residuals."""

    def vjp_fn(ct: Any) -> tuple:
        ct_leaves, ct_td = flatten(ct)
        if ct_td != out_td:
            raise ArgumentError(at_source(f"vjp_fn: the cotangent has structure {ct_td}, but "
                                          f"the output has structure {out_td}", user_source()))
        cts = []
        for leaf, aval in zip(ct_leaves, out_avals):
            if not aval.is_float:           # integer outputs have no cotangent
                continue
            if np.shape(leaf) != aval.shape:
                raise ArgumentError(at_source(
                    f"vjp_fn: cotangent of shape {np.shape(leaf)} for an output of shape "
                    f"{aval.shape}", user_source()))
            cts.append(leaf if isinstance(leaf, Tracer) else np.asarray(leaf, aval.dtype))
        grads = [_like(g, leaf) for g, leaf in zip(second(*saved, *cts), call.leaves)]
        return tuple(call.rebuild(grads)[i] for i in call.dynamic)

    vjp_fn.tape, vjp_fn.cache_info = second.tape, second.cache_info  # type: ignore[attr-defined]
    return vjp_fn


def _linear_fn(second: CachedTransform, saved: list[Any], call: Any, out_td: Any,
               out_avals: Sequence[Any]) -> Callable[..., Any]:
    """`linearize`'s `f_jvp`: the linear map on the saved residuals."""

    def f_jvp(*tangents: Any) -> Any:
        if len(tangents) != len(call.dynamic):
            raise ArgumentError(at_source(
                f"f_jvp: {len(tangents)} tangents for {len(call.dynamic)} primals; pass one "
                f"tangent per primal, with its structure and shapes", user_source()))
        outs = second(*saved, *tangent_leaves("f_jvp", call, tangents))
        return unflatten(out_td, [o if isinstance(o, Tracer) or np.ndim(o) else
                                  np.asarray(o)[()] for o in outs])

    f_jvp.tape, f_jvp.cache_info = second.tape, second.cache_info  # type: ignore[attr-defined]
    return f_jvp


def _like(grad: Any, leaf: Any) -> Any:
    """A gradient as an ndarray where the argument was one, else 0-d as a numpy scalar."""
    if isinstance(grad, Tracer) or isinstance(leaf, np.ndarray):
        return grad if isinstance(grad, Tracer) else np.asarray(grad)
    return grad[()] if np.ndim(grad) == 0 else grad


def vjp(fn: Callable[..., Any], *primals: Any, has_aux: bool = False,
        backend: str | None = None) -> Any:
    """`(fn(*primals), vjp_fn)`, where `vjp_fn(ct)` returns one cotangent per primal for an
    output cotangent `ct` of the output's structure. With has_aux: `(out, vjp_fn, aux)`.
    The call computes the outputs and the residuals of the reverse sweep (one program per
    function and signature); `vjp_fn` runs the reverse sweep alone on them (one more)."""
    return transform_of(("vjp", fn, has_aux, backend),
                        lambda: CachedTransform(VJP, fn, (), backend, has_aux=has_aux))(*primals)


def linearize(fn: Callable[..., Any], *primals: Any, has_aux: bool = False,
              backend: str | None = None) -> Any:
    """`(fn(*primals), f_jvp)`, where `f_jvp(*tangents)` is `J @ tangents` at the primals.
    With has_aux: `(out, f_jvp, aux)`. The call computes the outputs and the residuals of the
    JVP (one program per function and signature); `f_jvp` runs only the linear part on them
    (one more): no eqn of the forward computation."""
    return transform_of(("linearize", fn, has_aux, backend),
                        lambda: CachedTransform(LINEARIZE, fn, (), backend, has_aux=has_aux)
                        )(*primals)
