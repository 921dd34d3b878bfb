"""Batching of control flow (control/batching_rules.py): fori_loop, scan, while_loop, cond,
switch, checkpoint and the loops' reverse sweeps (loop_grad) under tj.vmap and tj.jacobian, and
the mapper that runs ops without a rule (custom_vjp, njit kernels) as one scan over the batch.

Every result is compared with a Python loop over the batch of a numpy reference, in compiled
code (conftest: first calls compiled and checked against the interpreter), on a first and a
later call; gradients of the batched programs against finite differences (float64). Batch
sizes 1, 3 and the carry's width; the tape does not grow with the batch size.
"""
from __future__ import annotations

import numba
import numpy as np
import pytest

import tapejit as tj
from gradcheck import check_grads
from tapejit.batching import batched_inline
from tapejit.control.subtapes import close
from tapejit.interpret import apply_impl, evaluate

WIDTH = 4
SIZES = (1, 3, WIDTH)
rng = np.random.default_rng(7)


def _close(got, want, tol=1e-12):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _eqns(tape) -> int:
    """Eqns of a tape and of every sub-tape in it."""
    return sum(1 + sum(_eqns(v) for v in e.kw.values() if hasattr(v, "eqns"))
               for e in tape.eqns)


# ---- the functions, their numpy references and their batched programs (shared) --------------
def fori(p, x, n):
    return tj.fori_loop(0, n, lambda i, s: s * np.cos(p) + 0.1 * np.sin(s[::-1]) * i, x)


def fori_ref(p, x, n):
    for i in range(n):
        x = x * np.cos(p) + 0.1 * np.sin(x[::-1]) * i
    return x


def rnn(h0, w, xs):
    return tj.scan(lambda h, x: (np.tanh(w * h + x), h * x), h0, xs)


def rnn_ref(h0, w, xs):
    ys = []
    for x in xs:
        ys.append(h0 * x)
        h0 = np.tanh(w * h0 + x)
    return h0, np.stack(ys)


def grow(x, limit):        # a trip count per element
    return tj.while_loop(lambda c: c[0] < limit, lambda c: (c[0] * 1.5 + 0.25, c[1] + 1), (x, 0))


def grow_ref(x, limit):
    k = 0
    while x < limit:
        x, k = x * 1.5 + 0.25, k + 1
    return x, k


BRANCHES = [np.sin, lambda x: x ** 3, lambda x: np.exp(-x) * 2.0]


def pick(i, x):
    return tj.switch(i, BRANCHES, x)


def pick_ref(i, x):
    return BRANCHES[int(np.clip(i, 0, 2))](x)


def nested(w, xs):
    def outer(c, x):
        inner, ys = tj.scan(lambda d, z: (d * w + z, d * z), c, x)
        return np.tanh(inner), np.sum(ys)
    return tj.scan(outer, np.zeros(WIDTH), xs)


def nested_ref(w, xs):
    c, outs = np.zeros(WIDTH), []
    for x in xs:
        total = 0.0
        for z in x:
            total, c = total + np.sum(c * z), c * w + z
        outs.append(total)
        c = np.tanh(c)
    return c, np.array(outs)


BLOCK = tj.checkpoint(lambda x, w: np.sin(x * w) * x)


def remat_loss(w, x, n):   # loop_grad: a run-time trip count and k snapshots
    h = tj.fori_loop(0, n, lambda i, h: BLOCK(np.tanh(h * w) + x, w), np.ones(WIDTH),
                     checkpoints=2)
    return np.sum(h ** 2)


def remat_ref(w, x, n):
    h = np.ones(WIDTH)
    for _ in range(n):
        h = np.tanh(h * w) + x
        h = np.sin(h * w) * h
    return np.sum(h ** 2)


V_FORI = tj.vmap(fori, in_axes=(0, None, None))
V_FORI_X = tj.vmap(fori, in_axes=(None, 0, None))
V_RNN = tj.vmap(rnn, in_axes=(None, 0, 1))                 # xs batched along their axis 1
V_GROW = tj.vmap(grow, in_axes=(0, None))
V_PICK = tj.vmap(pick, in_axes=(0, 0))
V_SHARED_PICK = tj.vmap(pick, in_axes=(None, 0))
V_NESTED = tj.vmap(nested, in_axes=(0, None))
V_REMAT_GRAD = tj.vmap(tj.grad(remat_loss), in_axes=(0, None, None))
V_COUNTS_GRAD = tj.vmap(tj.grad(remat_loss), in_axes=(0, None, 0))


# ---- loops ------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_fori_loop_batched_parameters_and_carries(size):
    x = rng.standard_normal(WIDTH)
    for _ in range(2):                                     # first and later call
        p = rng.standard_normal((size, WIDTH))
        _close(V_FORI(p, x, 6), np.stack([fori_ref(q, x, 6) for q in p]))
        xs = rng.standard_normal((size, WIDTH))
        _close(V_FORI_X(p[0], xs, 6), np.stack([fori_ref(p[0], y, 6) for y in xs]))


def test_scan_carry_xs_and_ys():
    h0 = rng.standard_normal(3)
    for size in (3, 1):
        w = rng.standard_normal((size, 3))
        xs = rng.standard_normal((5, size, 3))
        h, ys = V_RNN(h0, w, xs)
        want = [rnn_ref(h0, w[b], xs[:, b]) for b in range(size)]
        _close(h, np.stack([r[0] for r in want]))
        _close(ys, np.stack([r[1] for r in want]))


def test_while_loop_batched_predicate_runs_each_element_its_own_trips():
    for x in (np.array([0.1, 1.0, 5.0, 20.0]), np.array([3.0]), np.array([0.5, 9.0, 2.0])):
        got, trips = V_GROW(x, 10.0)
        want = [grow_ref(v, 10.0) for v in x]
        _close(got, [w[0] for w in want])
        np.testing.assert_array_equal(trips, [w[1] for w in want])    # 0 for 20.0
        assert trips.dtype == np.int64


def test_while_loop_unbatched_predicate_batches_the_body():
    def count(x, n):       # the predicate reads the shared counter only
        return tj.while_loop(lambda c: c[1] < n, lambda c: (np.sin(c[0]) + c[0], c[1] + 1),
                             (x, 0))[0]
    x = rng.standard_normal((3, WIDTH))
    got = tj.vmap(count, in_axes=(0, None))(x, 4)
    want = x
    for _ in range(4):
        want = np.sin(want) + want
    _close(got, want)


def test_scan_in_scan():
    xs = rng.standard_normal((3, 2, WIDTH))
    for size in (WIDTH, 1):
        w = rng.uniform(0.5, 0.9, (size, WIDTH))
        c, totals = V_NESTED(w, xs)
        want = [nested_ref(v, xs) for v in w]
        _close(c, np.stack([r[0] for r in want]))
        _close(totals, np.stack([r[1] for r in want]))


def test_batched_trip_counts_freeze_finished_elements():
    n = np.array([0, 3, 1, 5])
    p = rng.standard_normal(WIDTH)
    x = rng.standard_normal((4, WIDTH))
    got = tj.vmap(fori, in_axes=(None, 0, 0))(p, x, n)
    _close(got, np.stack([fori_ref(p, v, k) for v, k in zip(x, n)]))


# ---- branches -------------------------------------------------------------------------------
def test_cond_batched_index_selects_per_element():
    for _ in range(2):
        i = np.array([-1, 0, 1, 2, 7])                     # clamped, as the op
        x = rng.standard_normal(5)
        _close(V_PICK(i, x), [pick_ref(k, v) for k, v in zip(i, x)])
    x = rng.standard_normal((WIDTH, WIDTH))
    _close(V_SHARED_PICK(np.int64(2), x), np.stack([pick_ref(2, v) for v in x]))


def test_cond_of_a_batched_predicate_and_checkpoint():
    def f(x):
        y = tj.cond(np.sum(x) > 0, lambda x: np.sin(x), lambda x: x ** 3, x)
        return BLOCK(y, x)
    x = rng.standard_normal((6, 3))
    want = []
    for v in x:
        y = np.sin(v) if np.sum(v) > 0 else v ** 3
        want.append(np.sin(y * v) * y)
    _close(tj.vmap(f)(x), np.stack(want))
    check_grads(lambda x: np.sum(tj.vmap(f)(x) ** 2), [x])


# ---- gradients --------------------------------------------------------------------------------
def test_per_example_gradients_through_loop_grad():
    w = rng.uniform(0.2, 0.8, (3, WIDTH))
    n, h = np.array([2, 0, 5]), 1e-6
    check_grads(lambda v: remat_ref(v, 0.1, 7), [w[0]])           # the reference is right
    for got, counts in ((V_REMAT_GRAD(w, 0.1, 7), [7] * 3),
                        (V_COUNTS_GRAD(w, 0.1, n), n)):     # a count per element: the mapper
        for b, k in enumerate(counts):
            numeric = [(remat_ref(w[b] + h * e, 0.1, k) - remat_ref(w[b] - h * e, 0.1, k))
                       / 2 / h for e in np.eye(WIDTH)]
            np.testing.assert_allclose(got[b], numeric, rtol=1e-6, atol=1e-8)


def test_gradients_of_batched_loops_and_branches():
    i, ones = np.array([0, 1, 2]), np.ones((2, 3, WIDTH))

    def total(x, w):
        return (np.sum(V_GROW(x, 10.0)[0]) + np.sum(V_NESTED(w, ones[:, :2])[0])
                + np.sum(V_PICK(i, x)) + np.sum(V_RNN(ones[0, 0, :3], w[:, :3], ones[:, :, :3])[1]))
    check_grads(total, [np.array([0.1, 1.0, 5.0]), rng.uniform(0.2, 0.5, (3, WIDTH))],
                argnums=(0, 1))


def test_jacobian_batches_loops_in_one_pass():
    def f(p, x):
        return fori(p, x, 9)
    p, x = rng.standard_normal(WIDTH), rng.standard_normal(WIDTH)
    jac = tj.jacobian(f)(p, x)
    h = 1e-6
    numeric = np.stack([(fori_ref(p + h * e, x, 9) - fori_ref(p - h * e, x, 9)) / 2 / h
                        for e in np.eye(WIDTH)], axis=1)
    np.testing.assert_allclose(jac, numeric, rtol=1e-6, atol=1e-8)
    sizes = [_eqns(tj.make_tape(tj.jacobian(f))(np.ones(k), np.ones(k))) for k in (2, 16)]
    assert sizes[0] == sizes[1], sizes


def test_tape_does_not_grow_with_the_batch():
    def every(p, x, i):
        y = fori(p, x, 5) + rnn(x, p, np.ones((3, WIDTH)))[0]
        z = pick(i, y) + grow(np.sum(y), 30.0)[0] + BLOCK(y, p)
        return z + nested(p, np.ones((2, 2, WIDTH)))[0]
    v = tj.vmap(every)
    sizes = [_eqns(tj.make_tape(v)(np.ones((b, WIDTH)), np.ones((b, WIDTH)),
                                   np.zeros(b, np.int64))) for b in (2, 64)]
    assert sizes[0] == sizes[1], sizes
    x = rng.standard_normal((3, WIDTH))
    i = np.array([0, 2, 1])
    want = []
    for b in range(3):
        y = fori_ref(x[b], x[b], 5) + rnn_ref(x[b], x[b], np.ones((3, WIDTH)))[0]
        z = pick_ref(i[b], y) + grow_ref(np.sum(y), 30.0)[0] + np.sin(y * x[b]) * y
        want.append(z + nested_ref(x[b], np.ones((2, 2, WIDTH)))[0])
    _close(v(x, x, i), np.stack(want), 1e-10)


def test_batched_inline_on_a_traced_tape():
    """The rule itself: some inputs batched, others shared, outputs all batched."""
    tape = tj.make_tape(lambda x, limit: grow(x, limit))(1.0, 10.0)
    size = 3
    from tapejit.avals import Aval
    body, captured = close(lambda t: [v for v, _ in batched_inline(tape, t, [True, False])],
                           [Aval((size,), np.dtype(np.float64)), Aval((), np.dtype(np.float64))])
    x = np.array([0.5, 12.0, 3.0])
    got = evaluate(body, [x, np.float64(10.0), *captured], apply_impl)
    _close(got[0], [grow_ref(v, 10.0)[0] for v in x])
    np.testing.assert_array_equal(got[1], [grow_ref(v, 10.0)[1] for v in x])


# ---- the mapper: user code in a compiled loop over the batch ---------------------------------
@tj.custom_vjp
def log1pexp(x):
    return np.log1p(np.exp(x))


log1pexp.defvjp(lambda x: (log1pexp(x), x), lambda x, ct: (ct / (1.0 + np.exp(-x)),))


@numba.njit
def _dot_kernel(a, b):
    return np.sum(a * b)


dot = tj.njit_primitive(_dot_kernel, vjp=lambda ct, out, a, b: (ct * b, ct * a),
                        shape=lambda a, b: ((), a.dtype))


def test_mapper_runs_custom_vjp_and_njit_kernels_once_per_element():
    def f(x, w):
        return dot(log1pexp(x), w) + np.sum(log1pexp(x * w))
    v = tj.vmap(f, in_axes=(0, None))
    w = rng.standard_normal(3)
    for size in (1, 3):
        x = rng.standard_normal((size, 3))
        want = [np.sum(np.logaddexp(0, r) * w) + np.sum(np.logaddexp(0, r * w)) for r in x]
        _close(v(x, w), want)
    check_grads(lambda x: np.sum(v(x, w) ** 2), [x])
    sizes = [_eqns(tj.make_tape(v)(np.ones((b, 3)), w)) for b in (2, 64)]
    assert sizes[0] == sizes[1], sizes
