"""The tape passes: each preserves results, keeps the tape well-typed, and does its rewrite."""
import numpy as np
import pytest

import tapejit as tj
from tapejit.interpret import interpret
from tapejit.passes import PIPELINE, cse, dce, optimize, simplify

rng = np.random.default_rng(0)


def _programs():
    x, w = rng.random((3, 4)), rng.random(4)
    yield "exp-sum", lambda x, w: np.sum(np.exp(x * w)) + np.sum(np.exp(x * w) ** 2), (x, w)
    yield "double-neg", lambda x, w: np.sum(-(-x) * 1.0 + 0.0 - w / 1.0), (x, w)
    yield "mlp", lambda x, w: np.mean(np.tanh(x @ np.outer(w, w)) ** 2), (x, w)
    yield "indexing", lambda x, w: np.sum(x[:, ::-1][1:, [0, 2]] ** 3) * w[0], (x, w)


@pytest.mark.parametrize("name,fn,args", list(_programs()), ids=lambda v: v if isinstance(v, str) else "")
def test_pipeline_preserves_results_and_types(name, fn, args):
    joint = tj.make_tape(tj.value_and_grad(fn, argnums=(0, 1)))(*args)
    optimized = optimize(joint, after_each=lambda _, tape: tj.typecheck(tape))
    for before, after in zip(interpret(joint, args), interpret(optimized, args)):
        np.testing.assert_allclose(after, before, rtol=1e-14)
    assert len(optimized.eqns) <= len(joint.eqns)


def test_pipeline_lists_named_pure_passes():
    names = [name for name, _, _ in PIPELINE]
    assert names == ["split", "sums", "contract", "spread", "simplify", "merge_scans", "cse", "dce",
                     "fuse"]
    assert all(doc for _, _, doc in PIPELINE)


def _ops(tape):
    return [e.op for e in tape.eqns]


def test_simplify_removes_identities_and_double_negation():
    tape = tj.make_tape(lambda x: -(-x) * 1.0 + 0.0)(np.ones(3))
    assert _ops(tape) == ["neg", "neg", "mul", "add"]
    assert _ops(dce(simplify(tape))) == []


def test_simplify_keeps_broadcasting_identities():
    # x * 1 with a broadcast to a bigger shape is not a no-op
    tape = tj.make_tape(lambda x: x * np.ones((2, 3)))(np.ones(3))
    assert "mul" in _ops(dce(simplify(tape)))


def test_simplify_folds_scalar_literals_and_selects():
    tape = tj.make_tape(tj.grad(lambda x: x ** 4))(2.0)
    assert "select" not in _ops(tape)


def test_simplify_never_rewrites_x_times_zero():
    # NaN * 0 is NaN: the multiplication must stay
    tape = tj.make_tape(lambda x: x * 0.0)(np.ones(3))
    assert _ops(simplify(tape)) == ["mul"]


def test_cse_merges_identical_eqns():
    tape = tj.make_tape(lambda x: np.sin(x) + np.sin(x))(np.ones(3))
    assert _ops(tape).count("sin") == 2
    assert _ops(cse(tape)).count("sin") == 1


def test_dce_drops_unused_constants():
    c = np.arange(3.0)
    tape = tj.make_tape(lambda x: (x + c, x * 2.0)[1])(np.ones(3))
    assert tape.constvars == ()
