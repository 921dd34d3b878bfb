"""The Jacobians and forward mode, each compiled as ONE program per signature: jacrev
(jacobian), jacfwd, hessian and jvp. Each is a record (transforms/record.py) whose tape
transform is a Tape -> Tape function of derived_tapes.py: `jacobian_tape` (a batch of VJPs),
`jacfwd_tape` (a batch of JVPs), `jvp_tape` (the VJP transposed). `hessian(f)` is
`jacfwd(jacrev(f))`.

In the layers: beside api.py, on the transforms package (the record, the cache, the builder).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from .transforms.arguments import (CacheKey, CallArgs, argnums_signature, check_argnums,
                                   check_float_inputs, normalize_argnums, split_args)
from .derived_tapes import jacfwd_tape, jacobian_tape, jvp_tape
from .errors import ArgumentError, at_source, require_callable, user_source
from .transforms.traced import trace_flat
from .pytree import flatten, unflatten
from .trace import Tracer
from .transforms.cached import CachedTransform, transform_of
from .transforms.outputs import unboxing
from .transforms.record import Leaves, Specialization, Traced, Transform


def _jacobian(record: Transform, fn: Callable[..., Any], argnums: int | Sequence[int],
              has_aux: bool, static_argnums: int | Sequence[int], backend: str | None,
              ) -> CachedTransform:
    return CachedTransform(record, fn, static_argnums, backend,
                           argnums=check_argnums(argnums, record.name), has_aux=has_aux)


def _trace_jacobian(t: CachedTransform, call: CallArgs, key: CacheKey) -> Traced:
    check_float_inputs(t.transform, call, [j for i in key.options for j in call.leaf_range(i)])
    tape, out_td, aux_td = trace_flat(t.fn, call, t.has_aux)
    return Traced(tape, out_td, aux_td)


def _blocks(t: CachedTransform, call: CallArgs, key: CacheKey, traced: Traced) -> Traced:
    """Every Jacobian block of the float outputs w.r.t. the arguments argnums (then the aux
    leaves), in reverse or forward mode."""
    tape, n_out = traced.tape, traced.out.num_leaves
    for o in tape.outvars[:n_out]:
        if not o.aval.is_float:
            raise ArgumentError(at_source(
                f"{t.transform}: {t.__name__} returned a {o.aval} output; only float "
                f"outputs have Jacobians. Cast it (x.astype(float)), or return it as aux "
                f"with has_aux=True", tape.eqns[-1].src if tape.eqns else None))
    wrt = [j for i in key.options for j in call.leaf_range(i)]
    blocks = jacfwd_tape if t.record.name == "jacfwd" else jacobian_tape
    return traced._replace(tape=blocks(tape, wrt, n_out))


def _finish_jacobian(t: CachedTransform, program: Specialization, call: CallArgs,
                     traced: bool) -> Callable:
    argnums = normalize_argnums(t.argnums, call.n_pos)
    in_tds = [call.treedefs[call.dynamic.index(i)] for i in argnums]
    single = isinstance(t.argnums, (int, np.integer))
    out_td, aux_td, has_aux = program.out, program.aux, t.has_aux
    n_blocks = out_td.num_leaves * sum(td.num_leaves for td in in_tds)
    keep = [k < n_blocks for k in range(len(program.tape.outvars))]
    outs_of = unboxing(program.tape, keep, traced)

    def finish(outs: Sequence[Any]) -> Any:
        outs = outs_of(outs)
        it = iter(outs[:n_blocks])
        per_out = []
        for _ in range(out_td.num_leaves):
            per_arg = [unflatten(td, [next(it) for _ in range(td.num_leaves)])
                       for td in in_tds]
            per_out.append(per_arg[0] if single else tuple(per_arg))
        jac = unflatten(out_td, per_out)
        return (jac, unflatten(aux_td, outs[n_blocks:])) if has_aux else jac

    return finish


def _jacobian_how(t: CachedTransform, call: CallArgs, key: CacheKey, traced: Traced) -> tuple:
    return (t.record.name, tuple(j for i in key.options for j in call.leaf_range(i)),
            traced.out.num_leaves)


def _jvp_how(t: CachedTransform, call: Leaves, key: CacheKey, traced: Traced) -> tuple:
    return ("jvp", traced.out.num_leaves)


JACREV = Transform("jacrev", argnums_signature, _finish_jacobian, _blocks, "jacobian",
                   _trace_jacobian, _jacobian_how)
JACFWD = JACREV._replace(name="jacfwd")
JACOBIAN = JACREV._replace(name="jacobian")


def jacrev(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
           static_argnums: int | Sequence[int] = (), backend: str | None = None) -> Any:
    """The Jacobian of `fn` with respect to its arguments `argnums` in reverse mode (a batch of
    VJPs: best for fewer outputs than inputs), one compiled program per signature. For an output
    of shape `o` and an argument of shape `i` the block has shape `o + i`; pytrees nest as the
    output's structure of the arguments' (a tuple of them when argnums is a tuple). With
    has_aux, `fn` returns `(out, aux)` and the result is `(jacobian, aux)`."""
    return _jacobian(JACREV, fn, argnums, has_aux, static_argnums, backend)


def jacfwd(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
           static_argnums: int | Sequence[int] = (), backend: str | None = None) -> Any:
    """`jacrev` in forward mode (a batch of JVPs: best for fewer inputs than outputs); the same
    result and structure."""
    return _jacobian(JACFWD, fn, argnums, has_aux, static_argnums, backend)


def jacobian(fn: Callable[..., Any], argnums: int | Sequence[int] = 0,
             static_argnums: int | Sequence[int] = (), backend: str | None = None, *,
             has_aux: bool = False) -> Any:
    """`jacrev` (its arguments in this order)."""
    return _jacobian(JACOBIAN, fn, argnums, has_aux, static_argnums, backend)


def hessian(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
            static_argnums: int | Sequence[int] = (), backend: str | None = None) -> Any:
    """The Hessian of `fn`: `jacfwd(jacrev(fn))` (forward over reverse, as JAX), one compiled
    program per signature. Against `jacobian(grad(fn))` on 50- and 200-dimensional functions it
    runs as fast (within 3%) and compiles within 15%, so JAX's choice stays."""
    require_callable(fn, "tj.hessian")
    inner = _jacobian(JACREV, fn, argnums, has_aux, static_argnums, backend)
    return _jacobian(JACFWD, inner, argnums, has_aux, static_argnums, backend)


def _jvp_signature(t: CachedTransform, args: tuple, kwargs: dict) -> tuple[Leaves, CacheKey]:
    """The primals' call (traced) and the primals' then the tangents' leaves (run)."""
    primals, tangents = args[:t.n], args[t.n:]
    call, _ = split_args(t.fn, primals, {}, ())
    leaves = list(call.leaves) + tangent_leaves("jvp", call, tangents)
    names = list(call.names) + [f"t_{n}" for n, a in zip(call.names, call.avals) if a.is_float]
    return Leaves(leaves, names, tuple(range(len(args))), call), call.key((), (t.n,))


def _trace_primals(t: CachedTransform, call: Leaves, key: CacheKey) -> Traced:
    tape, out_td, _ = trace_flat(t.fn, call.traced)
    return Traced(tape, out_td)


def _tangent_tape(t: CachedTransform, call: Leaves, key: CacheKey, traced: Traced) -> Traced:
    return traced._replace(tape=jvp_tape(traced.tape, traced.out.num_leaves))


def _finish_jvp(t: CachedTransform, program: Specialization, call: Leaves,
                traced: bool) -> Callable:
    out_td, n = program.out, program.out.num_leaves
    outs_of = unboxing(program.tape, [False] * len(program.tape.outvars), traced)
    return lambda outs: (lambda o: (unflatten(out_td, o[:n]), unflatten(out_td, o[n:])))(
        outs_of(outs))


JVP = Transform("jvp", _jvp_signature, _finish_jvp, _tangent_tape, "jvp", _trace_primals,
                _jvp_how, fast_path=False)


def tangent_leaves(what: str, call: Any, tangents: Sequence[Any]) -> list[Any]:
    """The leaves of `tangents` (a tuple with the structure of the call's arguments) for the
    float leaves of the call, as arrays of their primals' dtypes; integer leaves' are dropped."""
    t_leaves, t_td = flatten(tuple(tangents))
    p_td = flatten(tuple(call.args[i] for i in call.dynamic))[1]
    if t_td != p_td:
        raise ArgumentError(at_source(f"{what}: the tangents have structure {t_td}, but the "
                                      f"primals have structure {p_td}", user_source()))
    for j, leaf in enumerate(t_leaves):
        if np.shape(leaf) != call.avals[j].shape:
            raise ArgumentError(at_source(
                f"{what}: tangent {call.names[j]} has shape {np.shape(leaf)}, but its primal "
                f"has shape {call.avals[j].shape}", user_source()))
    return [t_leaves[j] if isinstance(t_leaves[j], Tracer) else
            np.asarray(t_leaves[j], call.avals[j].dtype)
            for j, a in enumerate(call.avals) if a.is_float]


def jvp(fn: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any],
        backend: str | None = None) -> tuple[Any, Any]:
    """`(fn(*primals), J @ tangents)`: forward mode, by transposing the VJP. `tangents` has
    the structure of `primals` (tangents of integer leaves are ignored)."""
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise ArgumentError(at_source("jvp(fn, primals, tangents): primals and tangents are "
                                      "tuples of arguments", user_source()))
    if len(primals) != len(tangents):
        raise ArgumentError(at_source(f"jvp: {len(primals)} primals but {len(tangents)} "
                                      f"tangents", user_source()))
    return _jvp_of(fn, len(primals), backend)(*primals, *tangents)


def jvp_cache_info(fn: Callable[..., Any], n: int = 1, backend: str | None = None,
                   ) -> dict[str, Any]:
    """`cache_info()` of the programs `jvp(fn, primals, tangents, backend)` runs for `n`
    primals (traces, compiles, hits, ...)."""
    return _jvp_of(fn, n, backend).cache_info()


def _jvp_of(fn: Callable[..., Any], n: int, backend: str | None) -> CachedTransform:
    return transform_of(("jvp", fn, n, backend),
                        lambda: CachedTransform(JVP, fn, (), backend, n=n))
