"""The derived transforms, each compiled as ONE program per signature: jacrev (jacobian),
jacfwd, hessian and jvp; and vjp and linearize, two programs each (one computes the residuals
once, the other runs on them as often as it is called).

All are built from `autodiff.vjp_tape` alone:
- `split_joint` cuts a joint tape into its reverse sweep as a tape of its own (inputs: the
  residuals it reads, then the output cotangents). `jacobian_tape` runs the forward once and the
  reverse sweep once, batched (batching.py) over the rows of an identity matrix as cotangents:
  every row in one pass (reverse mode: best when outputs are fewer than inputs).
- `jvp_tape` transposes the VJP: the joint tape is linear in its cotangent inputs, so a second
  reverse pass with respect to them, seeded with the tangents, gives J @ tangent (forward mode
  without forward rules; it works through custom_vjp, whose bwd is ordinary IR). `jacfwd_tape`
  runs it once on a batch of one-hot tangents (best when inputs are fewer than outputs).
- `split_known` cuts a tape into what its first inputs determine and the rest (partial
  evaluation): `vjp` cuts the joint tape at the cotangents, `linearize` the JVP tape at the
  tangents, so `vjp_fn` and `f_jvp` run only the part that reads them, on stored residuals.
- `hessian(f)` is `jacfwd(jacrev(f))`.

In the layers: beside api.py and above the per-signature cache (dispatch.py);
gradient_tape.py uses `split_joint` and `jacobian_tape`.
"""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from . import autodiff
from .arguments import (argnums_signature, check_argnums, check_float_inputs,
                        normalize_argnums, split_args)
from .derived_tapes import jacfwd_tape, jacobian_tape, jvp_tape, split_known
from .dispatch import CachedTransform, Specialization, unbox, unbox_traced
from .errors import ArgumentError, at_source, require_callable, user_source
from .ir import Tape
from .passes import optimize
from .programs import rerolled, trace_flat
from .pytree import flatten, unflatten
from .trace import Tracer



@dataclasses.dataclass
class _Leaves:
    """A call's leaves for transforms whose arguments are not one function's (jvp)."""
    leaves: list[Any]
    names: list[str]
    dynamic: tuple[int, ...]


class _Jacobian(CachedTransform):
    """`jacrev(f)` and `jacfwd(f)`: per signature, one program computing every Jacobian block
    (then the aux leaves)."""

    def __init__(self, fn: Callable[..., Any], argnums: int | Sequence[int], has_aux: bool,
                 static_argnums: int | Sequence[int], backend: str | None,
                 transform: str) -> None:
        super().__init__(fn, static_argnums, backend, transform)
        self.argnums, self.has_aux = check_argnums(argnums, transform), has_aux

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(args, kwargs)

    def _signature(self, args: tuple, kwargs: dict) -> tuple[Any, tuple, Callable]:
        call, key, argnums = argnums_signature(self, args, kwargs)
        return call, key, lambda: self._build(call, argnums)

    def _build(self, call: Any, argnums: tuple[int, ...]) -> Specialization:
        wrt = [j for i in argnums for j in call.leaf_range(i)]
        check_float_inputs(self.transform, call, wrt)
        tape, out_td, aux_td = trace_flat(self.fn, call, self.has_aux)
        tape = rerolled(tape)
        n_out = out_td.num_leaves
        for o in tape.outvars[:n_out]:
            if not o.aval.is_float:
                raise ArgumentError(at_source(
                    f"{self.transform}: {self.__name__} returned a {o.aval} output; only float "
                    f"outputs have Jacobians. Cast it (x.astype(float)), or return it as aux "
                    f"with has_aux=True", tape.eqns[-1].src if tape.eqns else None))
        build = jacfwd_tape if self.transform == "jacfwd" else jacobian_tape
        return Specialization(optimize(build(tape, wrt, n_out)), aux_td, out=out_td)

    def _finisher(self, program: Specialization, call: Any, traced: bool) -> Callable:
        argnums = normalize_argnums(self.argnums, call.n_pos)
        in_tds = [call.treedefs[call.dynamic.index(i)] for i in argnums]
        single = isinstance(self.argnums, (int, np.integer))
        out_td, aux_td, has_aux = program.out, program.aux, self.has_aux
        n_blocks = out_td.num_leaves * sum(td.num_leaves for td in in_tds)
        keep = [k < n_blocks for k in range(len(program.tape.outvars))]
        outs_of = unbox_traced(keep) if traced else unbox(program.tape, keep)

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


def jacrev(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
           static_argnums: int | Sequence[int] = (), backend: str | None = None) -> Any:
    """The Jacobian of `fn` with respect to its arguments `argnums` in reverse mode (a batch of
    VJPs: best for fewer outputs than inputs), one compiled program per signature. For an output
    of shape `o` and an argument of shape `i` the block has shape `o + i`; pytrees nest as the
    output's structure of the arguments' (a tuple of them when argnums is a tuple). With
    has_aux, `fn` returns `(out, aux)` and the result is `(jacobian, aux)`."""
    return _Jacobian(fn, argnums, has_aux, static_argnums, backend, "jacrev")


def jacfwd(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
           static_argnums: int | Sequence[int] = (), backend: str | None = None) -> Any:
    """`jacrev` in forward mode (a batch of JVPs: best for fewer inputs than outputs); the same
    result and structure."""
    return _Jacobian(fn, argnums, has_aux, static_argnums, backend, "jacfwd")


def jacobian(fn: Callable[..., Any], argnums: int | Sequence[int] = 0,
             static_argnums: int | Sequence[int] = (), backend: str | None = None, *,
             has_aux: bool = False) -> Any:
    """`jacrev` (its arguments in this order)."""
    return _Jacobian(fn, argnums, has_aux, static_argnums, backend, "jacobian")


def hessian(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False,
            static_argnums: int | Sequence[int] = (), backend: str | None = None) -> Any:
    """The Hessian of `fn`: `jacfwd(jacrev(fn))` (forward over reverse, as JAX), one compiled
    program per signature. Against `jacobian(grad(fn))` on 50- and 200-dimensional functions it
    runs as fast (within 3%) and compiles within 15%, so JAX's choice stays."""
    require_callable(fn, "tj.hessian")
    inner = _Jacobian(fn, argnums, has_aux, static_argnums, backend, "jacrev")
    return _Jacobian(inner, argnums, has_aux, static_argnums, backend, "jacfwd")


class _Jvp(CachedTransform):
    """`jvp` of one function: called with the primals then the tangents."""

    transform = "jvp"

    def __init__(self, fn: Callable[..., Any], n: int, backend: str | None) -> None:
        super().__init__(fn, (), backend)
        self.n = n

    def __call__(self, *args: Any) -> Any:
        return self._call(args, {})

    def _signature(self, args: tuple, kwargs: dict) -> tuple[Any, tuple, Callable]:
        primals, tangents = args[:self.n], args[self.n:]
        call, _ = split_args(self.fn, primals, {}, ())
        tangent_leaves = _tangents("jvp", call, tangents)
        leaves = list(call.leaves) + tangent_leaves
        names = list(call.names) + [f"t_{n}" for n, a in zip(call.names, call.avals)
                                    if a.is_float]
        joined = _Leaves(leaves, names, tuple(range(len(args))))
        key = (self.n, *call.key(()))
        return joined, key, lambda: self._build(call)

    def _call(self, args: tuple, kwargs: dict) -> Any:
        # the fast path assumes each argument is one leaf of the program: not so here
        return self._call_slow(args, kwargs, None)

    def _build(self, call: Any) -> Specialization:
        tape, out_td, _ = trace_flat(self.fn, call)
        return Specialization(optimize(jvp_tape(rerolled(tape), out_td.num_leaves)), None,
                              out=out_td)

    def _finisher(self, program: Specialization, call: Any, traced: bool) -> Callable:
        out_td = program.out
        keep = [False] * len(program.tape.outvars)
        outs_of = unbox_traced(keep) if traced else unbox(program.tape, keep)
        n = out_td.num_leaves
        return lambda outs: (lambda o: (unflatten(out_td, o[:n]), unflatten(out_td, o[n:])))(
            outs_of(outs))


def _tangents(what: str, call: Any, tangents: Sequence[Any]) -> list[Any]:
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
    return _transform_of(("jvp", fn, len(primals), backend),
                         lambda: _Jvp(fn, len(primals), backend))(*primals, *tangents)


class _Second(CachedTransform):
    """The second program of `vjp` (the reverse sweep) or `linearize` (the linear map): one
    tape, run on the residuals and then the cotangents or tangents."""

    def __init__(self, fn: Callable[..., Any], tape: Tape, transform: str,
                 backend: str | None) -> None:
        super().__init__(fn, (), backend, transform)
        self.tape = tape

    def run(self, leaves: list[Any]) -> list[Any]:
        return self._call_slow(tuple(leaves), {}, None)

    def _signature(self, args: tuple, kwargs: dict) -> tuple[Any, tuple, Callable]:
        call = _Leaves(list(args), [v.name for v in self.tape.invars], tuple(range(len(args))))
        return call, ((), (), (), (), (), 0), lambda: Specialization(self.tape, None)

    def _finisher(self, program: Specialization, call: Any, traced: bool) -> Callable:
        return list


@dataclasses.dataclass(frozen=True)
class _Halves(Specialization):
    """`vjp`'s or `linearize`'s program: its tape computes the outputs, the aux leaves and the
    residuals; `second` runs on the inputs at `from_inputs` (copied), those residuals and the
    cotangents or tangents."""

    second: _Second | None = None
    from_inputs: tuple[int, ...] = ()


class _Split(CachedTransform):
    """`vjp(f, ...)` or `linearize(f, ...)`: per signature, the program that computes the
    outputs and the residuals, and the one that runs on them (`_Halves`)."""

    def __init__(self, fn: Callable[..., Any], transform: str, has_aux: bool,
                 backend: str | None) -> None:
        super().__init__(fn, (), backend, transform)
        self.has_aux = has_aux

    def __call__(self, *args: Any) -> Any:
        # no fast path: the result keeps the input leaves that are residuals
        return self._call_slow(args, {}, None)

    def _signature(self, args: tuple, kwargs: dict) -> tuple[Any, tuple, Callable]:
        call, static = split_args(self.fn, args, kwargs, ())
        if self.transform == "vjp":
            check_float_inputs("vjp", call, range(len(call.leaves)))
        return call, ((), *call.key(static)), lambda: self._build(call)

    def _build(self, call: Any) -> _Halves:
        tape, out_td, aux_td = trace_flat(self.fn, call, self.has_aux)
        tape = rerolled(tape)
        n_in, n_out, n_all = len(tape.invars), out_td.num_leaves, len(tape.outvars)
        if self.transform == "vjp":
            seeds = [autodiff.INPUT if o.aval.is_float else None for o in tape.outvars[:n_out]]
            full = autodiff.vjp_tape(tape, range(n_in), seeds + [None] * (n_all - n_out))
        else:
            full = jvp_tape(tape, n_out)
        first, second, from_inputs = split_known(full, n_in, n_all)
        return _Halves(optimize(first), aux_td, out=out_td, from_inputs=from_inputs,
                       second=_Second(self.fn, optimize(second), self.transform, self.backend))

    def _finisher(self, program: Specialization, call: Any, traced: bool) -> Callable:
        assert isinstance(program, _Halves) and program.second is not None
        second, from_inputs = program.second, program.from_inputs
        out_td, aux_td = program.out, program.aux
        n_out = out_td.num_leaves
        n_aux = aux_td.num_leaves if self.has_aux else 0
        keep = [k >= n_out + n_aux for k in range(len(program.tape.outvars))]
        outs_of = unbox_traced(keep) if traced else unbox(program.tape, keep)
        out_avals = [o.aval for o in program.tape.outvars[:n_out]]
        make = _vjp_fn if self.transform == "vjp" else _linear_fn
        has_aux = self.has_aux

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


def _vjp_fn(second: _Second, saved: list[Any], call: Any, out_td: Any,
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
        grads = [_like(g, leaf) for g, leaf in zip(second.run(saved + cts), call.leaves)]
        return tuple(call.rebuild(grads)[i] for i in call.dynamic)

    vjp_fn.tape, vjp_fn.cache_info = second.tape, second.cache_info  # type: ignore[attr-defined]
    return vjp_fn


def _linear_fn(second: _Second, saved: list[Any], call: Any, out_td: Any,
               out_avals: Sequence[Any]) -> Callable[..., Any]:
    """`linearize`'s `f_jvp`: the linear map on the saved residuals."""

    def f_jvp(*tangents: Any) -> Any:
        if len(tangents) != len(call.dynamic):
            raise ArgumentError(at_source(
                f"f_jvp: {len(tangents)} tangents for {len(call.dynamic)} primals; pass one "
                f"tangent per primal, with its structure and shapes", user_source()))
        outs = second.run(saved + _tangents("f_jvp", call, tangents))
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
    return _transform_of(("vjp", fn, has_aux, backend),
                         lambda: _Split(fn, "vjp", has_aux, backend))(*primals)


def linearize(fn: Callable[..., Any], *primals: Any, has_aux: bool = False,
              backend: str | None = None) -> Any:
    """`(fn(*primals), f_jvp)`, where `f_jvp(*tangents)` is `J @ tangents` at the primals.
    With has_aux: `(out, f_jvp, aux)`. The call computes the outputs and the residuals of the
    JVP (one program per function and signature); `f_jvp` runs only the linear part on them
    (one more): no eqn of the forward computation."""
    return _transform_of(("linearize", fn, has_aux, backend),
                         lambda: _Split(fn, "linearize", has_aux, backend))(*primals)


MAX_FUNCTIONS = 64    # jvp, vjp and linearize transforms kept (per function and options)
_functions: "OrderedDict[tuple, CachedTransform]" = OrderedDict()
_functions_lock = threading.Lock()


def _transform_of(key: tuple, make: Callable[[], Any]) -> Any:
    """The cached transform for `key` (kind, function, options): `jvp(f, ...)` called again
    traces and compiles only for a new signature, like `jit(f)` called again. The least
    recently used go first; a function that cannot be a key (unhashable) gets a new transform
    each call."""
    try:
        hash(key)
    except TypeError:
        return make()
    with _functions_lock:
        transform = _functions.get(key)
        if transform is None:
            transform = _functions[key] = make()
            if len(_functions) > MAX_FUNCTIONS:
                _functions.popitem(last=False)
        _functions.move_to_end(key)
        return transform


def jvp_cache_info(fn: Callable[..., Any], n: int = 1, backend: str | None = None,
                   ) -> dict[str, Any]:
    """`cache_info()` of the programs `jvp(fn, primals, tangents, backend)` runs for `n`
    primals (traces, compiles, hits, ...)."""
    return _transform_of(("jvp", fn, n, backend), lambda: _Jvp(fn, n, backend)).cache_info()
