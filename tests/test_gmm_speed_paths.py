"""The GMM gradient's fast paths (passes/contract.py): small matrix products become fused
loops, and a sum over a product's free axis moves before the product."""
import numpy as np

import tapejit as tj
from tapejit.interpret import interpret
from tapejit.passes import optimize, small_contractions, sums_of_products

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
    g = tj.value_and_grad(_gmm_like, argnums=(0, 1, 2))
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
