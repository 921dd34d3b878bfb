"""The derived transforms: jacobian, hessian and jvp, each compiled as ONE program per signature.

All three are built from `autodiff.vjp_tape` alone:
- `split_joint` cuts a joint tape into its reverse sweep as a tape of its own (inputs: the
  residuals it reads, then the output cotangents). `jacobian_tape` runs the forward once and the
  reverse sweep once, batched (batching.py) over the rows of an identity matrix as cotangents:
  every row in one pass (reverse mode: best when outputs are fewer than inputs).
- `jvp_tape` transposes the VJP: the joint tape is linear in its cotangent inputs, so a second
  reverse pass with respect to them, seeded with the tangents, gives J @ tangent (forward mode
  without forward rules; it works through custom_vjp, whose bwd is ordinary IR).
- `hessian(f)` is `jacobian(grad(f))`.

In the layers: above api.py (grad, for hessian) and the per-signature cache (dispatch.py);
gradient_tape.py uses `split_joint` and `jacobian_tape`.
"""
from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from . import autodiff
from .api import grad
from .arguments import argnums_signature, check_float_inputs, normalize_argnums, split_args
from .batching import batched_inline
from .dispatch import CachedTransform, Specialization, unbox, unbox_traced
from .errors import ArgumentError, at_source, user_source
from .interpret import inline
from .ir import Tape, Var
from .passes import dce, optimize
from .programs import rerolled, trace_flat
from .pytree import flatten, unflatten
from .trace import Tracer, new_trace


def split_joint(joint: Tape, n_primal_in: int, n_primal_out: int) -> Tape:
    """The reverse sweep of a joint tape (`vjp_tape`) as a tape: inputs are the values of the
    forward part it reads (residuals: primal inputs, forward eqn outputs), then the joint's
    cotangent inputs; outputs are the joint's cotangent outputs. The joint's constants it reads
    (e.g. the zeros a gather's VJP scatters into) stay constants of the new tape: they are
    no value of the forward part a caller could pass in."""
    start = joint.reverse_start if joint.reverse_start is not None else len(joint.eqns)
    reverse = joint.eqns[start:]
    cts = joint.invars[n_primal_in:]
    consts = {v.name: (v, c) for v, c in zip(joint.constvars, joint.consts)}
    defined = {o.name for e in reverse for o in e.outs} | {v.name for v in cts}
    residuals: dict[str, Var] = {}
    used: dict[str, tuple[Var, Any]] = {}
    for atom in [a for e in reverse for a in e.ins] + list(joint.outvars[n_primal_out:]):
        if not isinstance(atom, Var) or atom.name in defined:
            continue
        if atom.name in consts:
            used.setdefault(atom.name, consts[atom.name])
        else:
            residuals.setdefault(atom.name, atom)
    return Tape(tuple(residuals.values()) + tuple(cts), reverse, joint.outvars[n_primal_out:],
                tuple(v for v, _ in used.values()), tuple(c for _, c in used.values()))


def _forward(joint: Tape, n_primal_in: int, outs: Sequence[Any]) -> Tape:
    """The forward part of a joint tape, computing `outs` from the primal inputs."""
    start = joint.reverse_start if joint.reverse_start is not None else len(joint.eqns)
    return dce(Tape(joint.invars[:n_primal_in], joint.eqns[:start], tuple(outs),
                    joint.constvars, joint.consts))


def jacobian_tape(tape: Tape, wrt: Sequence[int], n_out: int) -> Tape:
    """Inputs: `tape`'s; outputs: for each of its first `n_out` outputs and each input in
    `wrt`, the Jacobian block of shape out.shape + input.shape."""
    n_in, outs = len(tape.invars), tape.outvars[:n_out]
    joint = autodiff.vjp_tape(tape, wrt, [autodiff.INPUT] * n_out + [None] * (
        len(tape.outvars) - n_out))
    reverse = split_joint(joint, n_in, len(tape.outvars))
    n_res = len(reverse.invars) - n_out
    forward = _forward(joint, n_in, reverse.invars[:n_res])
    sizes = [o.aval.size for o in outs]
    offsets, rows = np.cumsum([0] + sizes[:-1]), sum(sizes)
    with new_trace() as trace:
        inputs = [trace.new_tracer(v.aval, v.name) for v in tape.invars]
        if rows == 0:                      # no outputs: empty blocks
            blocks = [autodiff.filled(trace, v.aval.update(o.aval.shape + v.aval.shape), 0)
                      for o in outs for v in (tape.invars[i] for i in wrt)]
            return trace.to_tape([t._var for t in inputs], blocks)
        residuals = inline(forward, inputs)
        # the cotangents of all rows at once: output k's block of the identity's columns
        seeds = [Tracer(trace, trace.atom(np.eye(rows, dtype=o.aval.dtype)[:, at:at + m]))
                 .reshape((rows,) + o.aval.shape) for o, at, m in zip(outs, offsets, sizes)]
        grads = batched_inline(reverse, residuals + seeds, [False] * n_res + [True] * n_out)
        blocks = []
        for o, at, m in zip(outs, offsets, sizes):
            for (g, batched), i in zip(grads, wrt):
                shape = tape.invars[i].aval.shape
                if not batched:            # the same for every row (zeros)
                    g = np.broadcast_to(g, (rows,) + shape)
                blocks.append(g[at:at + m].reshape(o.aval.shape + shape))
        return dce(trace.to_tape([t._var for t in inputs], blocks))


def jvp_tape(tape: Tape, n_out: int) -> Tape:
    """Inputs: `tape`'s, then a tangent per float input; outputs: its first `n_out` outputs,
    then their tangents (J @ tangents; zeros for non-float outputs)."""
    n_in = len(tape.invars)
    floats = [i for i, v in enumerate(tape.invars) if v.aval.is_float]
    seeds = [autodiff.INPUT if o.aval.is_float else None for o in tape.outvars[:n_out]]
    seeds += [None] * (len(tape.outvars) - n_out)
    joint = autodiff.vjp_tape(tape, floats, seeds)
    n_ct = seeds.count(autodiff.INPUT)
    # the joint is linear in its cotangents: d<grads, t>/d ct = J @ t
    transposed = autodiff.vjp_tape(joint, range(n_in, n_in + n_ct),
                                   [None] * len(tape.outvars) + [autodiff.INPUT] * len(floats))
    with new_trace() as trace:
        inputs = [trace.new_tracer(v.aval, v.name) for v in tape.invars]
        tangents = [trace.new_tracer(tape.invars[i].aval, f"t_{tape.invars[i].name}")
                    for i in floats]
        cts = [autodiff.filled(trace, o.aval, 0) for o, s in zip(tape.outvars, seeds) if s]
        result = inline(transposed, inputs + cts + tangents)
        primal, jt = result[:n_out], iter(result[len(joint.outvars):])
        out_tangents = [next(jt) if s else autodiff.filled(trace, o.aval, 0)
                        for o, s in zip(tape.outvars[:n_out], seeds)]
        return dce(trace.to_tape([t._var for t in inputs + tangents], primal + out_tangents))


@dataclasses.dataclass
class _Leaves:
    """A call's leaves for transforms whose arguments are not one function's (jvp)."""
    leaves: list[Any]
    names: list[str]
    dynamic: tuple[int, ...]


class _Jacobian(CachedTransform):
    """`jacobian(f)`: per signature, one program computing every Jacobian block."""

    transform = "jacobian"

    def __init__(self, fn: Callable[..., Any], argnums: int | Sequence[int],
                 static_argnums: int | Sequence[int], backend: str | None) -> None:
        super().__init__(fn, static_argnums, backend)
        self.argnums = argnums

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._call(args, kwargs)

    def _signature(self, args: tuple, kwargs: dict) -> tuple[Any, tuple, Callable]:
        call, key, argnums = argnums_signature(self, args, kwargs)
        return call, key, lambda: self._build(call, argnums)

    def _build(self, call: Any, argnums: tuple[int, ...]) -> Specialization:
        wrt = [j for i in argnums for j in call.leaf_range(i)]
        check_float_inputs("jacobian", call, wrt)
        tape, out_td, _ = trace_flat(self.fn, call)
        tape = rerolled(tape)
        for o in tape.outvars:
            if not o.aval.is_float:
                raise ArgumentError(at_source(
                    f"jacobian: {self.__name__} returned a {o.aval} output; only float "
                    f"outputs have Jacobians", tape.eqns[-1].src if tape.eqns else None))
        jacobians = optimize(jacobian_tape(tape, wrt, len(tape.outvars)))
        return Specialization(jacobians, None, out=out_td)

    def _finisher(self, program: Specialization, call: Any, traced: bool) -> Callable:
        argnums = normalize_argnums(self.argnums, call.n_pos)
        in_tds = [call.treedefs[call.dynamic.index(i)] for i in argnums]
        single = isinstance(self.argnums, (int, np.integer))
        out_td = program.out
        keep = [True] * len(program.tape.outvars)
        outs_of = unbox_traced(keep) if traced else unbox(program.tape, keep)

        def finish(outs: Sequence[Any]) -> Any:
            it = iter(outs_of(outs))
            per_out = []
            for _ in range(out_td.num_leaves):
                per_arg = [unflatten(td, [next(it) for _ in range(td.num_leaves)])
                           for td in in_tds]
                per_out.append(per_arg[0] if single else tuple(per_arg))
            return unflatten(out_td, per_out)

        return finish


def jacobian(fn: Callable[..., Any], argnums: int | Sequence[int] = 0,
             static_argnums: int | Sequence[int] = (), backend: str | None = None) -> Any:
    """The Jacobian of `fn` with respect to its arguments `argnums` (reverse mode), computed by
    one compiled program per signature. For an output of shape `o` and an argument of shape `i`
    the block has shape `o + i`; pytrees nest as the output's structure of the arguments'
    (a tuple of them when argnums is a tuple)."""
    return _Jacobian(fn, argnums, static_argnums, backend)


def hessian(fn: Callable[..., Any], argnums: int | Sequence[int] = 0,
            static_argnums: int | Sequence[int] = (), backend: str | None = None) -> Any:
    """The Hessian of a scalar `fn`: `jacobian(grad(fn))`, one compiled program."""
    return _Jacobian(grad(fn, argnums, static_argnums=static_argnums), argnums,
                     static_argnums, backend)


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
        t_leaves, t_td = flatten(tangents)
        p_td = flatten(primals)[1]
        if t_td != p_td:
            raise ArgumentError(at_source(f"jvp: the tangents have structure {t_td}, but the "
                                          f"primals have structure {p_td}", user_source()))
        floats = [j for j, a in enumerate(call.avals) if a.is_float]
        for j, leaf in enumerate(t_leaves):
            if np.shape(leaf) != call.avals[j].shape:
                raise ArgumentError(at_source(
                    f"jvp: tangent {call.names[j]} has shape {np.shape(leaf)}, but its primal "
                    f"has shape {call.avals[j].shape}", user_source()))
        tangent_leaves = [np.asarray(t_leaves[j], call.avals[j].dtype)
                          if not isinstance(t_leaves[j], Tracer) else t_leaves[j]
                          for j in floats]
        leaves = list(call.leaves) + tangent_leaves
        names = list(call.names) + [f"t_{call.names[j]}" for j in floats]
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
    return _jvp_transform(fn, len(primals), backend)(*primals, *tangents)


MAX_JVP_FUNCTIONS = 64    # jvp transforms kept (one per function, arity and backend)
_jvps: "OrderedDict[tuple, _Jvp]" = OrderedDict()
_jvps_lock = threading.Lock()


def _jvp_transform(fn: Callable[..., Any], n: int, backend: str | None) -> _Jvp:
    """The cached `_Jvp` of `fn` with `n` primals: `jvp(f, ...)` called again traces and
    compiles only for a new signature, like `jit(f)` called again. The least recently used
    go first; a function that cannot be a key (unhashable) gets a new transform each call."""
    key = (fn, n, backend)
    try:
        hash(key)
    except TypeError:
        return _Jvp(fn, n, backend)
    with _jvps_lock:
        transform = _jvps.get(key)
        if transform is None:
            transform = _jvps[key] = _Jvp(fn, n, backend)
            if len(_jvps) > MAX_JVP_FUNCTIONS:
                _jvps.popitem(last=False)
        _jvps.move_to_end(key)
        return transform


def jvp_cache_info(fn: Callable[..., Any], n: int = 1, backend: str | None = None,
                   ) -> dict[str, Any]:
    """`cache_info()` of the programs `jvp(fn, primals, tangents, backend)` runs for `n`
    primals (traces, compiles, hits, ...)."""
    return _jvp_transform(fn, n, backend).cache_info()


