"""Control flow: primitives holding sub-tapes (the package's __init__ is their public API).

- `scan[body, n_carry, n_xs, length, reverse, checkpoints(, save)] n carry.. xs.. consts..`
  -> `carry.. ys..(, carries..)`: `n` (an i64 scalar, a run-time value) steps of `body:
  (carry, x, consts) -> (carry, y)`; step k reads `xs[k]` and writes `ys[k]` (k runs down from
  n-1 with `reverse`); `save=True` also stacks the carry before each step (the residuals of its
  reverse sweep). `length` is the static number of steps when xs or ys need one, else None.
- `while[cond, body, n_cond, checkpoints] carry.. cond_consts.. body_consts..` -> `carry..
  trips`: `body` while `cond: (carry, cond_consts) -> bool[]`; `trips` (i64) counts the steps
  taken (its VJP is a scan's over `trips` steps, keeping carries by `checkpoints`).
- `cond[branch0, branch1, ..] index operands..` -> outs: the branch `index` (clamped) of
  operands; every branch has the same outputs.
- `checkpoint[body] ins..` -> outs: the body, whose VJP recomputes it (nothing stored).
- `loop_grad[fwd, rev, n_carry, n_xs, n_consts, length, reverse, checkpoints]
  n carry.. xs.. consts.. ct_carry.. ct_ys.. rev_consts..` -> `ct_carry0.. ct_xs.. ct_consts..`:
  the reverse sweep of a scan (float leaves only): it runs the forward steps again, keeping
  carries as the `checkpoints` policy says (None: every carry; k: k snapshots and a segment
  buffer; "binomial": Revolve's schedule on O(log n) snapshots), then steps `rev` backwards:
  `rev: (carry, x, consts, ct_carry', ct_y, acc, rev_consts) -> (acc', ct_carry, ct_x)`;
  the cotangents' avals are `rev`'s outputs' (a batched `rev` gives batched cotangents of
  shared primal values).

Sub-tapes are closed: values a body captures are lifted into inputs (`close`, subtapes.py).
Their batching rules (vmap, jacobian) are in batching_rules.py. The VJPs are
ordinary IR, so derivatives of derivatives work: a scan of static length keeping every carry
reverses as a saving scan (the merge_scans pass merges it with the primal one) and a reverse scan of
the body's VJP over the stack (`_expansion`); other scans (run-time length, checkpoints) and
while loops reverse as a loop_grad, itself differentiated through that expansion (static
lengths only); a cond's VJP is a cond over the branches' VJPs; a checkpoint's a checkpoint of
the body's VJP.
"""
from __future__ import annotations

import functools
from typing import Any, Sequence

import numpy as np

from ..autodiff import INPUT, filled, vjp_tape
from ..avals import Aval
from ..errors import DtypeError, ShapeError, UnsupportedOperationError
from ..interpret import evaluate, inline
from ..ops import HOST, Kind, defop
from ..passes.bodies import unfuse
from ..trace import current_trace
from . import batching_rules as rules
from . import checkified, code
from .checkpointing import reversed_carries
from .operands import branches, split
from .subtapes import close, pad_inputs

I64 = np.dtype(np.int64)


def _floats(avals: Sequence[Aval]) -> list[Aval]:
    return [a for a in avals if a.is_float]


def value_aval(x: Any) -> Aval:
    if isinstance(x, Aval):
        return x
    return x.aval if hasattr(x, "aval") else Aval(np.shape(x), np.asarray(x).dtype)


def _check_same(what: str, got: Sequence[Aval], expected: Sequence[Aval]) -> None:
    if tuple(got) != tuple(expected):
        raise ShapeError(f"{what}: {' '.join(map(str, got)) or 'nothing'} where "
                         f"{' '.join(map(str, expected)) or 'nothing'} is expected")


def _check_count(n: Aval) -> None:
    if n.shape != () or n.dtype.kind not in "iu":
        raise DtypeError(f"a loop's trip count must be an integer scalar, not {n}")


# ---- scan ------------------------------------------------------------------------------------
def _stacked(aval: Aval, length: int | None) -> Aval:
    if length is None:
        raise ShapeError("a scan with xs or ys needs a static length")
    return Aval((length, *aval.shape), aval.dtype)


def _scan_shape(n: Aval, *avals: Aval, body: Any, n_carry: int, n_xs: int, length: int | None,
                reverse: bool, checkpoints: Any, save: bool = False) -> tuple[Aval, ...]:
    _check_count(n)
    carry, xs, consts = split(avals, n_carry, n_xs)
    if n_xs and any(x.shape[:1] != (length,) for x in xs):
        raise ShapeError(f"scan: every xs needs the leading axis {length}, not "
                         f"{' '.join(map(str, xs))}")
    _check_same("scan: the body's inputs", [v.aval for v in body.invars],
                carry + _slices(xs) + consts)
    outs = [o.aval for o in body.outvars]
    _check_same("scan: the body returns a carry", outs[:n_carry], carry)
    stacks = outs[n_carry:] + (carry if save else [])
    return tuple(carry) + tuple(_stacked(y, length) for y in stacks)


def _slices(stacks: Sequence[Aval]) -> list[Aval]:
    return [Aval(a.shape[1:], a.dtype) for a in stacks]


def _steps(n: int, reverse: bool) -> range:
    return range(n - 1, -1, -1) if reverse else range(n)


def _run(tape: Any, args: Sequence[Any]) -> list[Any]:
    return evaluate(tape, list(args))


def _scan_impl(n: Any, *ins: Any, body: Any, n_carry: int, n_xs: int, length: int | None,
               reverse: bool, checkpoints: Any, save: bool = False) -> tuple:
    carry, xs, consts = split(ins, n_carry, n_xs)
    avals = [o.aval for o in body.outvars[n_carry:]] + ([value_aval(c) for c in carry]
                                                         if save else [])
    ys = [np.empty(_stacked(a, length).shape, a.dtype) for a in avals]
    for k in _steps(int(n), reverse):
        outs = evaluate(body, carry + [x[k] for x in xs] + consts)
        for y, value in zip(ys, outs[n_carry:] + (carry if save else [])):
            y[k] = value
        carry = outs[:n_carry]
    return tuple(carry) + tuple(ys)


def _zeros_for(ct: Any, like: Any) -> Any:
    if ct is not None:
        return ct
    trace = current_trace()
    aval = value_aval(like)
    return filled(trace, aval, 0) if trace is not None else np.zeros(aval.shape, aval.dtype)


def _scan_vjp(cts: tuple, outs: tuple, n: Any, *ins: Any, body: Any, n_carry: int, n_xs: int,
              length: int | None, reverse: bool, checkpoints: Any, save: bool = False) -> tuple:
    # static length, every carry kept: a saving scan (which passes/loops.py merges with the
    # primal scan) and a reverse scan of the body's VJP over its stack (ordinary IR).
    # Else loop_grad runs the steps again, keeping carries by the policy
    carry, xs, consts = split(ins, n_carry, n_xs)
    if save:
        body = saving_body(body, n_carry)
    float_cts = [_zeros_for(ct, o) for ct, o in zip(cts, outs) if value_aval(o).is_float]
    rev, rev_consts = reverse_body(body, n_carry, n_xs)
    if length is not None and checkpoints is None:
        args = [*ins, *float_cts, *rev_consts]
        expanded = _expansion(body, rev, n_carry, n_xs, len(consts), length, reverse,
                              tuple(value_aval(x) for x in args))
        grads = iter(inline(expanded, [n, *args]))
    else:
        grads = iter(loop_grad(n, *ins, *float_cts, *rev_consts, fwd=body, rev=rev,
                               n_carry=n_carry, n_xs=n_xs, n_consts=len(consts),
                               length=length, reverse=reverse, checkpoints=checkpoints))
    return (None,) + tuple(next(grads) if value_aval(x).is_float else None
                           for x in carry + xs + consts)


@functools.lru_cache(maxsize=64)
def saving_body(body: Any, n_carry: int) -> Any:
    """The body of a saving scan as a plain one: its ys followed by its input carries."""
    tape, _ = close(lambda t: list(inline(body, t)) + t[:n_carry],
                    [v.aval for v in body.invars])
    return tape


scan = defop("scan", Kind.CONTROL, _scan_impl, shape=_scan_shape, vjp=_scan_vjp,
             multiple_results=True, batch=rules.scan,
             cpu=code.scan, cuda=HOST, checkify=checkified.scan)


# ---- tracing helpers -------------------------------------------------------------------------
def _vjp_of(tape: Any, wrt: Sequence[int]) -> Any:
    """The joint tape of `tape` w.r.t. inputs `wrt`, seeded at every float output."""
    tape = unfuse(tape)       # (optimized bodies hold fused groups)
    return vjp_tape(tape, wrt, [INPUT if o.aval.is_float else None for o in tape.outvars])


@functools.lru_cache(maxsize=256)
def reverse_body(body: Any, n_carry: int, n_xs: int) -> tuple[Any, tuple]:
    """loop_grad's `rev` for a scan body, and the values it captures (its rev_consts)."""
    ins = [v.aval for v in body.invars]
    wrt = [i for i, a in enumerate(ins) if a.is_float]
    joint = _vjp_of(body, wrt)
    ct_avals = _floats([o.aval for o in body.outvars])
    n_in, n_ct = len(ins), len(ct_avals)
    carry, xs, consts = split(ins, n_carry, n_xs)
    n_fc, n_fx = len(_floats(carry)), len(_floats(xs))

    def rev(t: list[Any]) -> list[Any]:
        grads = inline(joint, t[:n_in + n_ct])[len(body.outvars):]
        g_carry, g_x, g_consts = split(grads, n_fc, n_fx)
        acc = [a + g for a, g in zip(t[n_in + n_ct:], g_consts)]
        return acc + g_carry + g_x

    tape, captured = close(rev, ins + ct_avals + _floats(consts))
    return tape, tuple(captured)


# ---- loop_grad: the reverse sweep of a scan --------------------------------------------------
def _loop_grad_shape(n: Aval, *avals: Aval, fwd: Any, rev: Any, n_carry: int, n_xs: int,
                     n_consts: int, length: int | None, reverse: bool, checkpoints: Any
                     ) -> tuple[Aval, ...]:
    _check_count(n)
    carry, xs, consts, rest = split(avals, n_carry, n_xs, n_consts)
    _scan_shape(n, *carry, *xs, *consts, body=fwd, n_carry=n_carry, n_xs=n_xs, length=length,
                reverse=reverse, checkpoints=None)
    n_fy = len(_floats([o.aval for o in fwd.outvars[n_carry:]]))
    ct, ct_ys, rev_consts = split(rest, len(_floats(carry)), n_fy)
    acc, ct_carry, ct_x = split([o.aval for o in rev.outvars], len(_floats(consts)), len(ct))
    _check_same("loop_grad: the cotangents", ct, ct_carry)
    _check_same("loop_grad: rev's inputs", [v.aval for v in rev.invars],
                carry + _slices(xs) + consts + ct + _slices(ct_ys) + acc + rev_consts)
    return tuple(ct_carry + [_stacked(g, length) for g in ct_x] + acc)


def _loop_grad_impl(n: Any, *ins: Any, fwd: Any, rev: Any, n_carry: int, n_xs: int,
                    n_consts: int, length: int | None, reverse: bool, checkpoints: Any) -> tuple:
    n = int(n)
    carry, xs, consts, rest = split(ins, n_carry, n_xs, n_consts)
    n_fc = sum(value_aval(c).is_float for c in carry)
    n_fy = sum(o.aval.is_float for o in fwd.outvars[n_carry:])
    ct, ct_ys, rev_consts = split(rest, n_fc, n_fy)
    n_acc = sum(value_aval(c).is_float for c in consts)
    acc = [np.zeros(o.aval.shape, o.aval.dtype) for o in rev.outvars[:n_acc]]
    ct_xs = [np.zeros(_stacked(o.aval, length).shape, o.aval.dtype)
             for o in rev.outvars[n_acc + n_fc:]]
    order = list(_steps(n, reverse))

    def advance(c: list[Any], k: int) -> list[Any]:
        return _run(fwd, c + [x[order[k]] for x in xs] + consts)[:n_carry]

    for k, c in reversed_carries(n, list(carry), advance, checkpoints):
        kk = order[k]
        xk = [x[kk] for x in xs]
        outs = _run(rev, c + xk + consts + ct + [y[kk] for y in ct_ys] + acc + rev_consts)
        acc, ct, g_x = split(outs, len(acc), n_fc)
        for buf, g in zip(ct_xs, g_x):
            buf[kk] = g
    return tuple(ct) + tuple(ct_xs) + tuple(acc)


def _loop_grad_vjp(cts: tuple, outs: tuple, n: Any, *ins: Any, fwd: Any, rev: Any,
                   n_carry: int, n_xs: int, n_consts: int, length: int | None, reverse: bool,
                   checkpoints: Any) -> tuple:
    # d loop_grad: the VJP of its expansion into two scans (so: static lengths only)
    if length is None:
        raise UnsupportedOperationError(
            "a second derivative through a loop with a run-time trip count (tj.while_loop, or "
            "tj.fori_loop with a traced bound) is not supported; give tj.fori_loop static "
            "bounds or use tj.scan with a length")
    expanded = _expansion(fwd, rev, n_carry, n_xs, n_consts, length, reverse,
                          tuple(value_aval(x) for x in ins))
    float_in = [i for i, x in enumerate(ins) if value_aval(x).is_float]
    joint = _vjp_of(expanded, [i + 1 for i in float_in])    # (its input 0 is n)
    results = inline(joint, [n, *ins, *(_zeros_for(ct, o) for ct, o in zip(cts, outs))])
    grads = iter(results[len(outs):])
    return (None,) + tuple(next(grads) if i in float_in else None for i in range(len(ins)))


@functools.lru_cache(maxsize=64)
def _expansion(fwd: Any, rev: Any, n_carry: int, n_xs: int, n_consts: int, length: int,
               reverse: bool, avals: tuple[Aval, ...]) -> Any:
    """loop_grad as ordinary IR: a scan stacking the carries, then a reverse scan of `rev`
    over the stack. Inputs: n then loop_grad's inputs (n first, then shifted by one)."""
    carry_avals = list(avals[:n_carry])
    n_fc = len(_floats(carry_avals))
    n_acc = len(_floats(list(avals[n_carry + n_xs:n_carry + n_xs + n_consts])))
    acc_avals = [o.aval for o in rev.outvars[:n_acc]]       # (a batched rev's: batched)
    n_ys = len(fwd.outvars) - n_carry

    def expanded(t: list[Any]) -> list[Any]:
        n, rest = t[0], t[1:]
        carry, xs, consts, ct_all = split(rest, n_carry, n_xs, n_consts)
        ct_c, ct_ys, rev_consts = split(ct_all, n_fc, len(_floats(
            [o.aval for o in fwd.outvars[n_carry:]])))
        stack = scan(n, *carry, *xs, *consts, body=fwd, n_carry=n_carry, n_xs=n_xs,
                     length=length, reverse=reverse, checkpoints=None,
                     save=True)[n_carry + n_ys:]
        zero = [_zeros_for(None, a) for a in acc_avals]
        n_xs2 = n_carry + n_xs + len(ct_ys)

        def step(u: list[Any]) -> list[Any]:
            ct, acc, c, x, cy, cs, rc = split(u, n_fc, len(zero), n_carry, n_xs, len(ct_ys),
                                               n_consts)
            new_acc, ct_prev, g_x = split(inline(rev, c + x + cs + ct + cy + acc + rc),
                                          len(zero), n_fc)
            return ct_prev + new_acc + g_x

        body_avals = ([value_aval(a) for a in ct_c] + acc_avals
                      + [v.aval for v in fwd.invars[:n_carry + n_xs]]
                      + [Aval(value_aval(y).shape[1:], value_aval(y).dtype) for y in ct_ys]
                      + [value_aval(c) for c in consts] + [value_aval(r) for r in rev_consts])
        body, captured = close(step, body_avals)
        outs = scan(n, *ct_c, *zero, *stack, *xs, *ct_ys, *consts, *rev_consts, *captured,
                    body=body, n_carry=n_fc + len(zero), n_xs=n_xs2, length=length,
                    reverse=not reverse, checkpoints=None)
        ct0, acc, g_xs = split(outs, n_fc, len(zero))
        return ct0 + g_xs + acc

    tape, captured = close(expanded, [Aval((), I64), *avals])
    assert not captured, "the expansion of loop_grad captures nothing"
    return tape


loop_grad = defop("loop_grad", Kind.CONTROL, _loop_grad_impl, shape=_loop_grad_shape,
                  vjp=_loop_grad_vjp, multiple_results=True, batch=rules.loop_grad,
                  cpu=code.loop_grad, cuda=HOST)


# ---- while -----------------------------------------------------------------------------------
def _while_shape(*avals: Aval, cond: Any, body: Any, n_cond: int, checkpoints: Any
                 ) -> tuple[Aval, ...]:
    n_carry = len(body.outvars)
    carry, cond_consts, body_consts = split(avals, n_carry, n_cond)
    _check_same("while_loop: cond_fun's inputs", [v.aval for v in cond.invars],
                carry + cond_consts)
    pred = [o.aval for o in cond.outvars]
    if len(pred) != 1 or pred[0].shape != () or pred[0].dtype.kind != "b":
        raise DtypeError(f"while_loop: cond_fun must return a bool scalar, not "
                         f"{' '.join(map(str, pred))}")
    _check_same("while_loop: the body's inputs", [v.aval for v in body.invars],
                carry + body_consts)
    _check_same("while_loop: the body returns a carry", [o.aval for o in body.outvars], carry)
    return tuple(carry) + (Aval((), I64),)


def _while_impl(*ins: Any, cond: Any, body: Any, n_cond: int, checkpoints: Any) -> tuple:
    carry, cond_consts, body_consts = split(ins, len(body.outvars), n_cond)
    trips = 0
    while bool(_run(cond, carry + cond_consts)[0]):
        carry = _run(body, carry + body_consts)
        trips += 1
    return tuple(carry) + (np.int64(trips),)


def _while_vjp(cts: tuple, outs: tuple, *ins: Any, cond: Any, body: Any, n_cond: int,
               checkpoints: Any) -> tuple:
    # the loop ran `trips` steps of body: reverse them as a scan's (the carries again)
    n_carry = len(body.outvars)
    carry, cond_consts, body_consts = split(ins, n_carry, n_cond)
    grads = _scan_vjp(cts[:n_carry], outs[:n_carry], outs[n_carry], *carry, *body_consts,
                      body=body, n_carry=n_carry, n_xs=0, length=None, reverse=False,
                      checkpoints=checkpoints)[1:]
    return grads[:n_carry] + (None,) * n_cond + grads[n_carry:]


while_ = defop("while", Kind.CONTROL, _while_impl, shape=_while_shape, vjp=_while_vjp,
               multiple_results=True, batch=rules.while_,
               cpu=code.while_, cuda=HOST)


# ---- cond ------------------------------------------------------------------------------------
def _cond_shape(index: Aval, *avals: Aval, **params: Any) -> tuple[Aval, ...]:
    _check_count(index)
    outs = None
    for k, branch in enumerate(branches(params)):
        _check_same(f"cond: branch {k}'s inputs", [v.aval for v in branch.invars], avals)
        got = [o.aval for o in branch.outvars]
        if outs is None:
            outs = got
        _check_same(f"cond: branch {k} returns", got, outs)
    return tuple(outs or ())


def _cond_impl(index: Any, *ins: Any, **params: Any) -> tuple:
    chosen = branches(params)
    return tuple(_run(chosen[int(np.clip(index, 0, len(chosen) - 1))], ins))


def _cond_vjp(cts: tuple, outs: tuple, index: Any, *ins: Any, **params: Any) -> tuple:
    # d cond = the cond of the branches' VJPs (each recomputes its branch)
    float_out = [(ct, o) for ct, o in zip(cts, outs) if value_aval(o).is_float]
    avals = [value_aval(x) for x in ins] + [value_aval(o) for _, o in float_out]
    revs, captured = [], []
    for branch in branches(params):
        rev, got = _gradient_tape(branch, avals)
        revs.append(rev)
        captured.append(got)
    n_base = len(avals)
    revs = [pad_inputs(rev, n_base, [value_aval(c) for got in captured[:k] for c in got],
                 [value_aval(c) for got in captured[k + 1:] for c in got])
            for k, rev in enumerate(revs)]
    grads = iter(cond(index, *ins, *(_zeros_for(ct, o) for ct, o in float_out),
                      *(c for got in captured for c in got),
                      **{f"branch{k}": r for k, r in enumerate(revs)}))
    return (None,) + tuple(next(grads) if value_aval(x).is_float else None for x in ins)


def _gradient_tape(tape: Any, avals: list[Aval]) -> tuple[Any, list[Any]]:
    """A closed tape (inputs, float-output cotangents) -> cotangents of the float inputs."""
    wrt = [i for i, v in enumerate(tape.invars) if v.aval.is_float]
    joint = _vjp_of(tape, wrt)
    return close(lambda t: list(inline(joint, t))[len(tape.outvars):], avals)


cond = defop("cond", Kind.CONTROL, _cond_impl, shape=_cond_shape, vjp=_cond_vjp,
             multiple_results=True, batch=rules.cond,
             cpu=code.cond, cuda=HOST)


# ---- checkpoint ------------------------------------------------------------------------------
def _checkpoint_shape(*avals: Aval, body: Any) -> tuple[Aval, ...]:
    _check_same("checkpoint: the body's inputs", [v.aval for v in body.invars], avals)
    return tuple(o.aval for o in body.outvars)


def _checkpoint_impl(*ins: Any, body: Any) -> tuple:
    return tuple(_run(body, ins))


def _checkpoint_vjp(cts: tuple, outs: tuple, *ins: Any, body: Any) -> tuple:
    # d checkpoint(f) = checkpoint(f's VJP): the reverse sweep recomputes f's intermediates
    float_out = [(ct, o) for ct, o in zip(cts, outs) if value_aval(o).is_float]
    rev, captured = _gradient_tape(body, [value_aval(x) for x in ins]
                                   + [value_aval(o) for _, o in float_out])
    grads = iter(checkpoint(*ins, *(_zeros_for(ct, o) for ct, o in float_out), *captured,
                            body=rev))
    return tuple(next(grads) if value_aval(x).is_float else None for x in ins)


checkpoint = defop("checkpoint", Kind.CONTROL, _checkpoint_impl, shape=_checkpoint_shape,
                   vjp=_checkpoint_vjp, multiple_results=True, batch=rules.checkpoint,
                   cpu=code.checkpoint, cuda=HOST)
