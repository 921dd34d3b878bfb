"""The tape passes: each preserves results, keeps the tape well-typed, and does its rewrite."""
import numpy as np
import pytest

import tapejit as tj
from tapejit.interpret import evaluate, interpret, plan
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


# a fused group whose body reuses the outer names, nests a group, and returns an input, a
# repeated value and a literal
_FUSED = """{ lambda x:f64[3] y:f64[3] .
  let v1:f64[3] = neg y
      v3:f64[3] a:f64[3] b:f64[3] c:f64[] d:f64[3] = fused[body=...] x v1
        body = { lambda x:f64[3] y:f64[3] .
                 let v1:f64[3] = sin x
                     v3:f64[3] = mul v1 y
                     v4:f64[3] e:f64[3] = fused[body=...] v3 x
                       body = { lambda v3:f64[3] q:f64[3] .
                                let v1:f64[3] = add v3 q
                                in ( v1, q ) }
                 in ( v4, x, v4, 2.0:f64[], e ) }
      v5:f64[3] = mul v3 v1
  in ( v5, a, b, c, d, v1 ) }"""


def test_interpreter_runs_fused_groups_in_place():
    tape = tj.parse_tape(_FUSED)
    x, y = np.arange(3.0), np.full(3, 2.0)
    group = np.sin(x) * -y + x
    expected = [group * -y, x, group, 2.0, x, -y]
    assert "fused" not in [step.eqn.op for step in plan(tape).steps[:4]]
    for planned in plan(tape), plan(tape, in_place=False):
        for got, want in zip(evaluate(tape, [x, y], planned=planned), expected, strict=True):
            np.testing.assert_array_equal(got, want)


def test_pipeline_lists_named_pure_passes():
    names = [name for name, _, _ in PIPELINE]
    assert names == ["split", "sums", "contract", "spread", "simplify", "merge_scans", "cse", "dce"]
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
