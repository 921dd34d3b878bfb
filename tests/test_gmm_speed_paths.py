"""The GMM gradient's fast paths (passes/contract.py): small matrix products become fused
loops, and a sum over a product's free axis moves before the product."""
import numpy as np

import tapejit as tj
from tapejit.dims import Dims
from tapejit.interpret import interpret
from tapejit.passes import fused, optimize, small_contractions, sums_of_products

rng = np.random.default_rng(1)


def _gmm_like(L, x, mu):
    xc = x[:, None, :] - mu[None, :, :]                       # (n, K, d)
    qx = np.einsum("kij,nkj->nki", L, xc)
    return np.sum(np.exp(-0.5 * np.sum(qx * qx, axis=2)))


def _args(n=40, k=3, d=4):
    return rng.normal(size=(k, d, d)), rng.normal(size=(n, d)), rng.normal(size=(k, d))


def test_small_products_become_loops_and_sums_move_before_products():
    args = _args()
    tapes = tj.explain(tj.value_and_grad(_gmm_like, argnums=(0, 2)))(*args).tapes
    joint = next(t for name, t in tapes.items() if name.startswith("autodiff"))
    assert any(e.op == "dot_general" for e in joint.eqns)
    summed = sums_of_products(joint)
    tj.typecheck(summed)
    looped = small_contractions(summed)
    tj.typecheck(looped)
    assert not any(e.op == "dot_general" for e in looped.eqns)
    for before, after in zip(interpret(joint, args), interpret(looped, args)):
        np.testing.assert_allclose(after, before, rtol=1e-12)
    # the means' gradient sums over the points before its product: no (n, K, d) product left
    biggest = max((e for e in summed.eqns if e.op == "dot_general"),
                  key=lambda e: np.prod(e.outs[0].aval.shape))
    assert np.prod(biggest.outs[0].aval.shape) <= 40 * 3 * 4
    optimize(joint, after_each=lambda _, tape: tj.typecheck(tape))


def test_compiled_gradient_matches_interpreter_for_other_sizes():
    g = tj.value_and_grad(_gmm_like, argnums=(0, 1, 2), backend="numba")
    ref = tj.value_and_grad(_gmm_like, argnums=(0, 1, 2), backend="interpret")
    for n, k, d in ((40, 3, 4), (7, 1, 20), (33, 17, 2)):
        args = _args(n, k, d)
        (v, grads), (rv, rgrads) = g(*args), ref(*args)
        np.testing.assert_allclose(v, rv, rtol=1e-10)
        for a, b in zip(grads, rgrads):
            np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_large_products_stay_blas():
    x, w = rng.normal(size=(50, 40)), rng.normal(size=(40, 30))
    tape = tj.make_tape(lambda x, w: np.sum(np.tanh(x @ w)))(x, w)
    assert small_contractions(tape) is tape


def test_a_broadcast_of_cheap_arithmetic_reads_its_operands():
    from tapejit.passes import spread_broadcasts
    args = _args()
    joint = small_contractions(tj.make_tape(_gmm_like)(*args))
    spread = spread_broadcasts(joint)
    tj.typecheck(spread)
    # the contraction reads xc = x - mu along its contracted axis: broadcast x and mu instead
    producers = {o.name: e for e in spread.eqns for o in e.outs}
    subs = [e for e in spread.eqns if e.op == "sub"
            and all(producers[a.name].op == "broadcast_in_dim" for a in e.ins)]
    assert subs and not any(e.op == "broadcast_in_dim" and producers.get(e.ins[0].name, e).op
                            == "sub" for e in spread.eqns)
    np.testing.assert_allclose(interpret(spread, args), interpret(joint, args), rtol=1e-12)
    # ... so xc is never stored: the contraction's loop nest recomputes it
    bodies = [e.kw["body"] for e in fused(optimize(joint)).eqns if e.op == "fused"]
    contraction = [b for b in bodies
                   if any(e.op == "reduce_sum" and e.ins[0].aval.ndim == 4 for e in b.eqns)]
    assert len(contraction) == 1 and any(e.op == "sub" for e in contraction[0].eqns)
    assert not any(e.op == "sub" and e.outs[0] in b.outvars for b in bodies for e in b.eqns)


def test_small_trailing_sizes_are_fixed_and_a_new_batch_keeps_the_program():
    from tapejit.codegen.cpu import fixed_symbols
    tape = tj.make_tape(_gmm_like)(*_args(n=40, k=5, d=4))
    dims = Dims(tape)
    fixed = {dims.length(s) for s in fixed_symbols(tape, dims)}
    assert fixed == {4}                      # d; not the points n nor the components k
    g = tj.value_and_grad(_gmm_like, argnums=(0, 2), backend="numba")
    g(*_args(n=40, k=5, d=4))
    g(*_args(n=50, k=6, d=4))                # new point and component counts: same program
    assert g.cache_info()["compiles"] + g.cache_info()["disk_loads"] == 1
    args = _args(n=40, k=5, d=5)             # a new dimension: new source, a new program
    value, grads = g(*args)
    assert g.cache_info()["compiles"] + g.cache_info()["disk_loads"] == 2
    ref = tj.value_and_grad(_gmm_like, argnums=(0, 2), backend="interpret")(*args)
    for a, b in zip(grads, ref[1]):
        np.testing.assert_allclose(a, b, rtol=1e-10)


def _split_cases():
    """Products of a sum or difference of broadcasts, the difference on either side."""
    x, mu, a = rng.normal(size=(30, 4)), rng.normal(size=(3, 4)), rng.normal(size=(30, 3, 5))
    yield (lambda a, x, mu: np.einsum("nki,nkj->kij", a, x[:, None, :] - mu[None]), (a, x, mu))
    yield (lambda a, x, mu: np.einsum("nkj,nki->kji", x[:, None, :] + mu[None], a), (a, x, mu))
    yield (lambda a, x, mu: np.einsum("kin,nkj->kij", np.transpose(a, (1, 2, 0)),
                                      x[:, None, :] - mu[None]), (a, x, mu))  # through a .T
    w = rng.normal(size=(30, 5))                  # unbatched: contracted over n only
    yield (lambda w, x, c: w.T @ (x - c[None, :]), (w, x, mu[0]))
    # a short contraction whose terms lose the batch axis (x) or a free one (mu): a GMM's
    # forward Q_k (x_i - mu_k) becomes one x @ Q^T product and K small ones
    q = rng.normal(size=(3, 4, 4))
    yield (lambda q, x, mu: np.einsum("kij,nkj->nki", q, x[:, None, :] - mu[None]), (q, x, mu))


def test_long_products_of_differences_split_into_blas_products():
    from tapejit.passes import split_products
    for fn, args in _split_cases():
        tape = tj.make_tape(fn)(*args)
        split = split_products(tape)
        tj.typecheck(split)
        products = [e for e in split.eqns if e.op == "dot_general"]
        assert len(products) == 2 and not any(e.op == "dot_general" and e.kw["batch"][0]
                                              and e.ins[0].aval.shape[0] == 30
                                              for e in split.eqns)
        assert any(not e.kw["batch"][0] for e in products)      # one unbatched BLAS product
        np.testing.assert_allclose(interpret(split, args), interpret(tape, args), rtol=1e-12)
        np.testing.assert_allclose(tj.jit(fn)(*args), fn(*args), rtol=1e-12)
    # a short contraction stays one product (contract.py makes it a loop)
    x, mu, a = rng.normal(size=(8, 4)), rng.normal(size=(3, 4)), rng.normal(size=(8, 3, 5))
    tape = tj.make_tape(lambda a, x, mu: np.einsum("nki,nkj->kij", a, x[:, None] - mu))(a, x, mu)
    assert split_products(tape) is tape


def test_two_cheap_ops_read_after_a_product_are_recomputed_not_stored():
    """`q * (x - mu)` (the sub recomputed too), read by the nest after a BLAS product: its
    readers recompute it instead of storing an (n, K, d) array (the GMM's forward)."""
    from tapejit.codegen.plan import plan
    from tapejit.codegen.schedule import steps
    n, k, d = 256, 25, 10                    # (n, K, d) values large enough to recompute

    def f(q, x, mu, w):
        scaled = q[None] * (x[:, None, :] - mu[None])
        return np.sum((scaled + (x @ w).reshape(n, k, d)) ** 2)

    args = (rng.normal(size=(k, d)), rng.normal(size=(n, d)), rng.normal(size=(k, d)),
            rng.normal(size=(d, k * d)))
    vg = tj.value_and_grad(f, argnums=(0, 2))     # the reverse sweep reads x - mu again
    tape = fused(optimize(tj.make_tape(vg)(*args)))
    body_eqns = [e for g in tape.eqns if g.op == "fused" for e in g.kw["body"].eqns]
    scaled = next(e.outs[0].name for e in body_eqns if e.op == "mul"
                  and e.outs[0].aval.shape == (n, k, d))
    program = plan(tape, steps(tape, Dims(tape).scope(tape)))
    assert scaled not in program.arrays and scaled in program.recomputed
    got, want = tj.value_and_grad(f, argnums=(0, 2), backend="numba")(*args), vg(*args)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
    for a, b in zip(got[1], want[1]):
        np.testing.assert_allclose(a, b, rtol=1e-10)
