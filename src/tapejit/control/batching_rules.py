"""Batching rules of the control-flow ops (their records in primitives.py hold them as
`batch`), and the mapper batching.py runs ops without a rule through (`mapper`).

A sub-tape is batched by `batching.batched_inline` inside a new trace (`batched_tape`): one
batched body, whatever the batch size, so the rules record one eqn as the op itself does.
- scan: a carry is batched if its init is or if the body makes it so (a fixed point); xs are
  scanned along their own axis, so their batch axis moves behind it (and back for the ys). A
  batched trip count runs the longest count, each element's carry frozen (a select) once its
  own count is done.
- while: an unbatched predicate batches the body; a batched one runs while any element's holds,
  each carry updated where its own predicate holds (JAX's rule), `trips` counted per element.
- cond: an unbatched index batches every branch; a batched one runs every branch on the whole
  batch and selects per element.
- checkpoint: its body batched. loop_grad: `fwd` batched like a scan's body, `rev` with every
  cotangent and accumulator batched (the primal carries stay as they are).
- mapper: any other op as one scan over the batch axis, the op applied to one element per step.
Every output comes back with the leading batch axis (broadcast where it has none).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from ..avals import Aval, aval_of
from ..batching import batch_size, batched_inline, broadcast_batch
from ..ops import layout as L
from ..trace import bind_recorded
from .operands import branches, split
from .subtapes import close, pad_inputs

I64 = np.dtype(np.int64)


# ---- helpers ---------------------------------------------------------------------------------
def _batched_aval(aval: Aval, size: int) -> Aval:
    return Aval((size,) + aval.shape, aval.dtype)


def _lead(x: Any, batched: bool, size: int) -> Any:
    """`x` with the batch axis in front (broadcast if it has none)."""
    return x if batched else broadcast_batch(x, size)


def _swap(x: Any) -> Any:
    """Axes 0 and 1 exchanged: a batch of stacks <-> a stack of batches."""
    perm = (1, 0) + tuple(range(2, np.ndim(x)))
    return bind_recorded(L.transpose, [x], {"perm": perm})


def _stack_out(y: Any, batched: bool, size: int) -> Any:
    """A scan's stacked output (steps, batch, ...) as (batch, steps, ...)."""
    return _swap(y) if batched else broadcast_batch(y, size)


def _inits(carry: Sequence[Any], given: Sequence[bool], flags: Sequence[bool], size: int
           ) -> list[Any]:
    """Carry inits with the batch axis where their flag (the fixed point's) wants it."""
    return [_lead(c, g or not f, size) for c, g, f in zip(carry, given, flags)]


def _value_aval(x: Any) -> Aval:
    return x.aval if hasattr(x, "aval") else aval_of(np.asarray(x))


def _expand(pred: Any, ndim: int) -> Any:
    """A per-element bool (batch,) shaped to select among values of rank `ndim` (batch first)."""
    return np.reshape(pred, np.shape(pred) + (1,) * (ndim - 1))


def _inline(tape: Any, values: Sequence[Any], flags: Sequence[bool], size: int,
            force: Sequence[bool] | bool = False) -> tuple[list[Any], list[bool]]:
    """`tape` batched on `values`: its outputs and their flags; outputs flagged in `force` (or
    all, for True) always batched."""
    outs = batched_inline(tape, values, flags)
    force = [force] * len(outs) if isinstance(force, bool) else force
    return ([_lead(v, f or not must, size) for (v, f), must in zip(outs, force)],
            [f or must for (_, f), must in zip(outs, force)])


def batched_tape(tape: Any, flags: Sequence[bool], size: int,
                 force: Sequence[bool] | bool = False) -> tuple[Any, list[Any], list[bool]]:
    """`tape` closed again with a batch axis of `size` on its inputs flagged in `flags`:
    the new tape, what it captures, and which of its outputs are batched (`force` as
    `_inline`)."""
    out_flags: list[bool] = []

    def run(t: list[Any]) -> list[Any]:
        outs, got = _inline(tape, t, flags, size, force)
        out_flags.extend(got)
        return outs

    avals = [_batched_aval(v.aval, size) if f else v.aval for v, f in zip(tape.invars, flags)]
    new, captured = close(run, avals)
    return new, captured, out_flags


def carried(body: Any, n_carry: int, carry_flags: Sequence[bool], other_flags: Sequence[bool],
            size: int, force_rest: bool = False) -> tuple[list[bool], Any, list[Any], list[bool]]:
    """A loop body batched at the fixed point of its carries' flags: a carry is batched if its
    init is or the body makes it so. Returns the carry flags, the body, its captures and its
    output flags (the outputs after the carries forced batched with `force_rest`)."""
    flags = list(carry_flags)
    while True:
        n_rest = len(body.outvars) - n_carry
        tape, captured, outs = batched_tape(body, flags + list(other_flags), size,
                                            flags + [force_rest] * n_rest)
        if outs[:n_carry] == flags:
            return flags, tape, captured, outs
        flags = outs[:n_carry]


# ---- scan ------------------------------------------------------------------------------------
def scan(bind: Callable[..., Any], values: list[Any], flags: list[bool], *, body: Any,
         n_carry: int, n_xs: int, length: int | None, reverse: bool, checkpoints: Any,
         save: bool = False) -> Any:
    size = batch_size(values, flags)
    if flags[0]:
        return _scan_counts(bind, values, flags, body=body, n_carry=n_carry, n_xs=n_xs,
                            length=length, reverse=reverse, checkpoints=checkpoints, save=save)
    carry, xs, consts = split(values[1:], n_carry, n_xs)
    cf, xf, kf = split(flags[1:], n_carry, n_xs)
    cf, tape, captured, outs = carried(body, n_carry, cf, xf + kf, size)
    results = bind(values[0], *_inits(carry, flags[1:], cf, size),
                   *(_swap(x) if f else x for x, f in zip(xs, xf)), *consts, *captured,
                   body=tape, n_carry=n_carry, n_xs=n_xs, length=length, reverse=reverse,
                   checkpoints=checkpoints, save=save)
    c_out, ys, saved = split(results, n_carry, len(body.outvars) - n_carry)
    return (tuple(_lead(c, f, size) for c, f in zip(c_out, cf))
            + tuple(_stack_out(y, f, size) for y, f in zip(ys, outs[n_carry:]))
            + tuple(_stack_out(s, f, size) for s, f in zip(saved, cf)))


def _scan_counts(bind: Callable[..., Any], values: list[Any], flags: list[bool], *, body: Any,
                 n_carry: int, n_xs: int, length: int | None, reverse: bool,
                 checkpoints: Any, save: bool) -> Any:
    """A trip count per element: the longest count's steps, a carry frozen once its element's
    count is done (step k of element b reads xs[k] and writes ys[k], as alone)."""
    n_ys = len(body.outvars) - n_carry
    if reverse and (n_xs or n_ys or save):
        return NotImplemented          # step k would read xs[n_b - 1 - k]: the mapper's
    size = batch_size(values, flags)
    counts, (carry, xs, consts) = values[0], split(values[1:], n_carry, n_xs)
    cf, xf, kf = split(flags[1:], n_carry, n_xs)
    in_avals = [v.aval for v in body.invars]
    c_avals, x_avals, k_avals = split(in_avals, n_carry, n_xs)
    avals = ([Aval((), I64)] + [_batched_aval(a, size) for a in c_avals]
             + [_batched_aval(a, size) if f else a for a, f in zip(x_avals, xf)]
             + [_batched_aval(a, size) if f else a for a, f in zip(k_avals, kf)]
             + [_value_aval(counts)])
    ys_flags: list[bool] = []

    def step(t: list[Any]) -> list[Any]:
        (k,), c, x, ks, (n,) = split(t, 1, n_carry, n_xs, len(consts))
        outs, got = _inline(body, c + x + ks, [True] * n_carry + xf + kf, size,
                            [True] * n_carry + [False] * n_ys)
        ys_flags.extend(got[n_carry:])
        live = k < n
        new = [np.where(_expand(live, np.ndim(o)), o, old) for o, old in zip(outs, c)]
        return [k + 1] + new + outs[n_carry:]

    tape, captured = close(step, avals)
    results = bind(np.max(counts), np.int64(0), *_inits(carry, cf, [True] * n_carry, size),
                   *(_swap(x) if f else x for x, f in zip(xs, xf)), *consts, counts, *captured,
                   body=tape, n_carry=1 + n_carry, n_xs=n_xs, length=length, reverse=reverse,
                   checkpoints=checkpoints, save=save)
    c_out, ys, saved = split(results[1:], n_carry, n_ys)
    return (tuple(c_out) + tuple(_stack_out(y, f, size) for y, f in zip(ys, ys_flags))
            + tuple(_swap(s) for s in saved[1:]))


# ---- while -----------------------------------------------------------------------------------
def while_(bind: Callable[..., Any], values: list[Any], flags: list[bool], *, cond: Any,
           body: Any, n_cond: int, checkpoints: Any) -> Any:
    size = batch_size(values, flags)
    n_carry = len(body.outvars)
    carry, c_consts, b_consts = split(values, n_carry, n_cond)
    cf, ccf, bcf = split(flags, n_carry, n_cond)
    cf, step, captured, _ = carried(body, n_carry, cf, bcf, size)
    test, test_captured, (each,) = batched_tape(cond, cf + ccf, size)
    if each:
        return _while_each(bind, values, flags, cond=cond, body=body, n_cond=n_cond,
                           checkpoints=checkpoints)
    results = bind(*_inits(carry, flags[:n_carry], cf, size), *c_consts, *test_captured,
                   *b_consts, *captured, cond=test, body=step,
                   n_cond=n_cond + len(test_captured), checkpoints=checkpoints)
    return (tuple(_lead(c, f, size) for c, f in zip(results, cf))
            + (broadcast_batch(results[-1], size),))


def _while_each(bind: Callable[..., Any], values: list[Any], flags: list[bool], *, cond: Any,
                body: Any, n_cond: int, checkpoints: Any) -> Any:
    """A batched predicate: step while any element's holds; a carry takes its new value where
    its element's predicate holds (every carry batched); `trips` counted per element."""
    size = batch_size(values, flags)
    n_carry = len(body.outvars)
    carry, c_consts, b_consts = split(values, n_carry, n_cond)
    _, ccf, bcf = split(flags, n_carry, n_cond)
    every = [True] * n_carry
    c_avals = [_batched_aval(v.aval, size) for v in body.invars[:n_carry]]
    count = _batched_aval(Aval((), I64), size)
    cc_avals = [_batched_aval(v.aval, size) if f else v.aval
                for v, f in zip(cond.invars[n_carry:], ccf)]
    bc_avals = [_batched_aval(v.aval, size) if f else v.aval
                for v, f in zip(body.invars[n_carry:], bcf)]

    def holds(c: list[Any], cc: list[Any]) -> Any:
        return _inline(cond, c + cc, every + ccf, size, True)[0][0]

    def test(t: list[Any]) -> list[Any]:
        c, _, cc = split(t, n_carry, 1)
        return [np.any(holds(c, cc))]

    def step(t: list[Any]) -> list[Any]:
        c, (n,), cc, bc = split(t, n_carry, 1, n_cond)
        live = holds(c, cc)
        new, _ = _inline(body, c + bc, every + bcf, size, True)
        return ([np.where(_expand(live, np.ndim(o)), o, old) for o, old in zip(new, c)]
                + [n + live.astype(I64)])

    test_tape, test_captured = close(test, c_avals + [count] + cc_avals)
    step_tape, step_captured = close(step, c_avals + [count] + cc_avals + bc_avals)
    results = bind(*_inits(carry, flags[:n_carry], every, size),
                   broadcast_batch(np.int64(0), size), *c_consts, *test_captured, *c_consts,
                   *b_consts, *step_captured, cond=test_tape, body=step_tape,
                   n_cond=n_cond + len(test_captured), checkpoints=checkpoints)
    return tuple(results[:n_carry + 1])


# ---- cond ------------------------------------------------------------------------------------
def cond(bind: Callable[..., Any], values: list[Any], flags: list[bool], **params: Any) -> Any:
    size = batch_size(values, flags)
    index, operands, of = values[0], values[1:], flags[1:]
    if flags[0]:
        return _select(index, operands, of, branches(params), size)
    made = [batched_tape(branch, of, size, True) for branch in branches(params)]
    avals = [[_value_aval(c) for c in captured] for _, captured, _ in made]
    padded = {f"branch{k}": pad_inputs(tape, len(operands), sum(avals[:k], []),
                                       sum(avals[k + 1:], []))
              for k, (tape, _, _) in enumerate(made)}
    return bind(index, *operands, *(c for _, captured, _ in made for c in captured), **padded)


def _select(index: Any, operands: list[Any], flags: list[bool], chosen: list[Any],
            size: int) -> tuple:
    """A batched index: every branch on the whole batch, each element's result selected by
    its index (clamped to the branches, as the op)."""
    outs = [_inline(branch, operands, flags, size, True)[0] for branch in chosen]
    result = outs[-1]
    for k in range(len(chosen) - 2, -1, -1):
        pick = index <= 0 if k == 0 else index == k
        result = [np.where(_expand(pick, np.ndim(a)), a, r) for a, r in zip(outs[k], result)]
    return tuple(result)


# ---- checkpoint ------------------------------------------------------------------------------
def checkpoint(bind: Callable[..., Any], values: list[Any], flags: list[bool], *,
               body: Any) -> Any:
    tape, captured, _ = batched_tape(body, flags, batch_size(values, flags), True)
    return bind(*values, *captured, body=tape)


# ---- loop_grad -------------------------------------------------------------------------------
def loop_grad(bind: Callable[..., Any], values: list[Any], flags: list[bool], *, fwd: Any,
              rev: Any, n_carry: int, n_xs: int, n_consts: int, length: int | None,
              reverse: bool, checkpoints: Any) -> Any:
    """`fwd` batched as a scan's body; `rev` with every cotangent and accumulator batched (its
    outputs' avals give loop_grad's). What batched `fwd` captures becomes further consts
    (their gradients, dropped, pass through `rev`)."""
    if flags[0]:
        return NotImplemented          # a trip count per element: the mapper's
    size = batch_size(values, flags)
    carry, xs, consts, rest = split(values[1:], n_carry, n_xs, n_consts)
    cf, xf, kf, rf = split(flags[1:], n_carry, n_xs, n_consts)
    prim = [v.aval for v in fwd.invars]
    n_fc = sum(a.is_float for a in prim[:n_carry])
    n_acc = sum(a.is_float for a in prim[n_carry + n_xs:])
    n_fy = sum(o.aval.is_float for o in fwd.outvars[n_carry:])
    cts, ct_ys, rev_consts = split(rest, n_fc, n_fy)
    ctf, cyf, rcf = split(rf, n_fc, n_fy)
    cf, fwd2, fcap, _ = carried(fwd, n_carry, cf, xf + kf, size)
    f_avals = [_value_aval(c) for c in fcap]
    extra = [a for a in f_avals if a.is_float]
    r_prim, r_ct, r_rc = split([v.aval for v in rev.invars], len(prim), n_fc + n_fy + n_acc)
    every = [True] * (n_fc + n_fy + n_acc)

    def step(t: list[Any]) -> list[Any]:
        p, _, ct, acc_extra, rc = split(t, len(prim), len(fcap), len(r_ct), len(extra))
        outs, _ = _inline(rev, p + ct + rc, cf + xf + kf + every + rcf, size, True)
        acc, ct_carry, ct_x = split(outs, n_acc, n_fc)
        return acc + acc_extra + ct_carry + ct_x

    avals = ([_batched_aval(a, size) if f else a for a, f in zip(r_prim, cf + xf + kf)]
             + f_avals + [_batched_aval(a, size) for a in r_ct] + extra
             + [_batched_aval(a, size) if f else a for a, f in zip(r_rc, rcf)])
    rev2, captured = close(step, avals)
    results = bind(values[0], *_inits(carry, flags[1:n_carry + 1], cf, size),
                   *(_swap(x) if f else x for x, f in zip(xs, xf)), *consts, *fcap,
                   *(_lead(c, f, size) for c, f in zip(cts, ctf)),
                   *(_swap(_lead(y, f, size)) for y, f in zip(ct_ys, cyf)), *rev_consts,
                   *captured, fwd=fwd2, rev=rev2, n_carry=n_carry, n_xs=n_xs,
                   n_consts=n_consts + len(fcap), length=length, reverse=reverse,
                   checkpoints=checkpoints)
    n_fx = len(results) - n_fc - n_acc - len(extra)
    ct_carry, ct_xs, acc = split(results, n_fc, n_fx)
    return tuple(ct_carry) + tuple(_swap(g) for g in ct_xs) + tuple(acc[:n_acc])


# ---- the mapper ------------------------------------------------------------------------------
def mapper(scan_op: Any) -> Callable[[Any, list, list, dict], Any]:
    """batching.py's mapper: an op without a batching rule as one `scan_op` eqn over the batch
    axis (xs: the batched operands, consts: the others; the op on one element per step)."""
    def run(op: Any, values: list, flags: list, params: dict) -> Any:
        size = batch_size(values, flags)
        xs = [v for v, f in zip(values, flags) if f]
        consts = [v for v, f in zip(values, flags) if not f]

        def step(t: list[Any]) -> list[Any]:
            x, k = iter(t[:len(xs)]), iter(t[len(xs):])
            out = bind_recorded(op, [next(x) if f else next(k) for f in flags], params)
            return list(out) if op.multiple_results else [out]

        avals = ([Aval(a.shape[1:], a.dtype) for a in map(_value_aval, xs)]
                 + [_value_aval(c) for c in consts])
        body, captured = close(step, avals)
        outs = bind_recorded(scan_op, [np.int64(size), *xs, *consts, *captured], {
            "body": body, "n_carry": 0, "n_xs": len(xs), "length": size, "reverse": False,
            "checkpoints": None})
        return tuple(outs) if op.multiple_results else outs[0]
    return run
