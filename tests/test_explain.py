"""tj.explain, TAPEJIT_DUMP and generated lines in tracebacks.

One numba compile in all (the dump test runs a program); explain itself never compiles, and the
traceback test runs the generated function's Python body (`py_func`).
"""
from __future__ import annotations

import linecache
import traceback

import numpy as np
import pytest

import tapejit as tj
from tapejit import config as tj_config
from tapejit.codegen.schedule import Call, Loop
from tapejit.interpret import interpret
from tapejit.passes import PIPELINE


def loss(w, x, y):
    return np.mean((np.tanh(x @ w) - y) ** 2)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    # x @ w stays a BLAS call: its rows and contracted length are past passes/contract.py's SMALL
    return rng.normal(size=(17, 2)), rng.normal(size=(20, 17)), rng.normal(size=(20, 2))


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A private cache directory and no dump, unless a test sets TAPEJIT_DUMP."""
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TAPEJIT_DUMP", raising=False)
    tj_config.reload()
    yield monkeypatch
    monkeypatch.undo()
    tj_config.reload()


def test_explain_shows_every_stage(data):
    ex = tj.explain(loss)(*data)
    text = str(ex)
    passes = [name for name, _, _ in PIPELINE] + ["fuse"]
    assert list(ex.tapes) == ["traced", "autodiff", *passes]
    for name in passes:
        assert f"after {name}:" in text
    for tape in ex.tapes.values():
        assert isinstance(tape, tj.Tape)
        tj.typecheck(tape)
    assert ex.tape is ex.tapes["fuse"]
    assert "fused" in [e.op for e in ex.tape.eqns]
    assert "fused" not in [e.op for e in ex.tapes["dce"].eqns]
    assert ex.tapes["autodiff"].reverse_start is not None
    assert any(isinstance(g, Loop) for g in ex.groups)
    assert any(isinstance(g, Call) and g.eqn.op == "dot_general" for g in ex.groups)
    assert "Loop over 20x2" in text and "Call" in text
    assert "@numba.njit" in ex.source and "def entry(" in ex.source and ex.source.rstrip() in text
    assert ex.module.startswith("tj_") and ex.module in text
    # the explained program is the one value_and_grad runs
    value, grad = tj.value_and_grad(loss, backend="interpret")(*data)
    got = interpret(ex.tape, list(data))
    np.testing.assert_allclose(got[0], value)
    np.testing.assert_allclose(got[1], grad)
    printed = []
    ex._repr_pretty_(type("P", (), {"text": lambda self, s: printed.append(s)})(), False)
    assert printed == [text] and repr(ex).startswith("<Explanation of loss")


def test_explain_forward_transforms_and_errors(data):
    forward = tj.explain(loss, grad=False)(*data)
    assert "autodiff" not in forward.tapes and len(forward.tape.outvars) == 1
    g = tj.grad(loss, argnums=1)
    g(*data)
    ex = tj.explain(g)(*data)          # the transform's own argnums; its cache counts
    assert ex.tape.outvars[1].aval.shape == (20, 17)   # x's shape
    assert "w.r.t. argument(s) 1" in ex.text and "last_miss=first call" in ex.text
    shown = tj.explain(loss, backend="interpret")(*data)    # the tape it runs is not fused
    assert list(shown.tapes)[-1] == "dce" and "fused" not in [e.op for e in shown.tape.eqns]
    assert not shown.groups and shown.source == "" and "no fusion, no code" in shown.text
    assert "fusion groups" not in shown.text
    with pytest.raises(tj.ArgumentError, match="grad=False"):
        tj.explain(lambda x: np.tanh(x))(data[0])
    with pytest.raises(tj.ArgumentError, match="unknown backend"):
        tj.explain(loss, backend="tpu")


def test_dump_writes_each_compiled_program(env, data, tmp_path):
    pytest.importorskip("numba")
    dump = tmp_path / "dump"
    env.setenv("TAPEJIT_DUMP", str(dump))
    tj_config.reload()
    vg = tj.value_and_grad(loss, backend="numba")
    value, grad = vg(*data)
    ref = tj.value_and_grad(loss, backend="interpret")(*data)
    np.testing.assert_allclose(value, ref[0])
    np.testing.assert_allclose(grad, ref[1])
    assert vg.cache_info()["compiles"] == 1
    [file] = dump.glob("*.txt")
    assert file.name == tj.explain(loss)(*data).module.replace(".py", ".txt")   # its name
    text = file.read_text()
    assert tj.explain(loss)(*data).source.rstrip() in text   # explain shows what ran
    assert "Loop over" in text and "compiled: the fused tape" in text


def test_traceback_shows_generated_line(env):
    """numba's generated module (its Python body) in a traceback."""
    from tapejit.codegen.cpu import entry_args
    from tapejit.compile import Compiled

    env.setenv("TAPEJIT_CODEGEN", "numba")
    tj_config.reload()
    x = np.linspace(0.1, 1.0, 6).reshape(2, 3)
    compiled = Compiled(tj.explain(lambda x: np.sum(np.tanh(x) * x))(x).tape)
    path = compiled.program.path
    file_lines = path.read_text().splitlines()
    bad_sizes = compiled.sizes * 3                 # loop bounds past the arrays' ends
    with pytest.raises(IndexError) as info:        # the Python body: no numba compile
        compiled.program.fn.py_func(*entry_args(compiled.tape, [x]), bad_sizes,
                                    compiled.workspace)
    path.rename(path.with_suffix(".moved"))        # the file is gone: linecache still has it
    linecache.checkcache()
    frames = [f for f in traceback.extract_tb(info.tb) if f.filename == str(path)]
    assert frames, "no frame in the generated module"
    line = file_lines[frames[-1].lineno - 1].strip()
    assert line and frames[-1].line == line
    assert line in "".join(traceback.format_exception(info.value))


def test_groups_show_inner_stages():
    x = np.linspace(0.0, 1.0, 20).reshape(5, 4)
    ex = tj.explain(lambda x: np.sum(np.log(np.sum(np.exp(x), axis=1))))(x)
    staged = [g for g in ex.groups if isinstance(g, Loop) and g.stages
              and any(stage != g.domain for stage in g.stages)]
    assert staged and "stage over 5x4" in ex.text


def _stages_of(ex, stage):
    """The stages explain showed: traced, the record's own, then every pass."""
    passes = [name for name, _, _ in PIPELINE]
    assert list(ex.tapes) == ["traced", *([stage] if stage else []), *passes, "fuse"]
    assert ex.tape is ex.tapes["fuse"] and ex.source


def f3(x):
    return np.sin(x) * np.sum(x ** 2)


@pytest.mark.parametrize("make, stage, n_out", [
    (lambda: tj.jit(f3), None, 1),
    (lambda: tj.grad(lambda x: np.sum(f3(x))), "autodiff", 2),
    (lambda: tj.value_and_grad(lambda x: np.sum(f3(x))), "autodiff", 2),
    (lambda: tj.jacrev(f3), "jacobian", 1),
    (lambda: tj.jacfwd(f3), "jacobian", 1),
    (lambda: tj.jacobian(f3), "jacobian", 1),
    (lambda: tj.hessian(lambda x: np.sum(f3(x))), "jacobian", 1),
    (lambda: tj.vmap(f3), "batched", 1),
], ids=["jit", "grad", "value_and_grad", "jacrev", "jacfwd", "jacobian", "hessian", "vmap"])
def test_explain_shows_the_program_each_transform_runs(make, stage, n_out):
    """Every transform's program comes from the one builder: explain shows its stages, and
    what the last tape computes is what the transform returns."""
    x = np.linspace(0.1, 1.0, 3)
    xs = np.stack([x, 2 * x])
    transform = make()
    arg = xs if stage == "batched" else x
    want = transform(arg)
    ex = tj.explain(transform)(arg)
    _stages_of(ex, stage)
    assert ("forward program" if stage is None else "program") in ex.title
    assert len(ex.tape.outvars) == n_out
    got = interpret(ex.tape, [arg])[-1]
    np.testing.assert_allclose(got, want[1] if isinstance(want, tuple) else want, rtol=1e-12)
    assert "cache of the transform: traces=1" in ex.text      # its own counts


def test_explain_jvp_vjp_and_linearize_by_name():
    x, t = np.linspace(0.1, 1.0, 3), np.ones(3)
    ex = tj.explain(f3, transform="jvp")((x,), (t,))
    _stages_of(ex, "jvp")
    out, tangent = tj.jvp(f3, (x,), (t,), backend="interpret")
    got = interpret(ex.tape, [x, t])
    np.testing.assert_allclose(got[0], out)
    np.testing.assert_allclose(got[1], tangent)
    for name, stage in (("vjp", "autodiff"), ("linearize", "jvp")):
        ex = tj.explain(f3, transform=name)(x)
        _stages_of(ex, stage)
        assert f"{name} program" in ex.title and "second program, run on the residuals" in ex.text
        np.testing.assert_allclose(interpret(ex.tape, [x])[0], f3(x))
    with pytest.raises(tj.ArgumentError, match="transform='vmap'; choose one of jvp"):
        tj.explain(f3, transform="vmap")


def unrolled(p):
    for _ in range(30):
        p = p + 0.01 * np.sin(p)
    return p


def test_every_transform_rerolls_an_unrolled_loop():
    """A plain Python loop becomes a scan under each transform (cache_info counts it)."""
    x = np.linspace(0.1, 1.0, 3)
    scalar = lambda p: np.sum(unrolled(p) ** 2)  # noqa: E731
    for transform in (tj.jacobian(unrolled), tj.jacfwd(unrolled), tj.hessian(scalar),
                      tj.vmap(unrolled), tj.grad(scalar), tj.jit(unrolled)):
        arg = np.stack([x, x]) if getattr(transform, "transform", "") == "vmap" else x
        transform(arg)
        info = getattr(transform, "__wrapped_transform__", transform).cache_info()
        assert info["rerolled"] >= 1, transform
    tj.jvp(unrolled, (x,), (x,))
    assert tj.jvp_cache_info(unrolled)["rerolled"] == 1
    ex = tj.explain(tj.jacobian(unrolled))(x)
    assert "rerolled" in ex.tapes and "re-rolled into a scan" in ex.text


def test_gradient_tape_rerolls_an_unrolled_loop():
    """GradientTape's sweep of a recorded unrolled loop is one program with a scan; its
    gradient and Jacobian are the unrolled program's."""
    x = np.linspace(0.1, 1.0, 3)
    before = tj.tape_cache_info()["rerolled"]
    with tj.GradientTape(persistent=True) as tape:
        p = tape.watch(x)
        y = unrolled(p)
        loss = np.sum(y ** 2)
    grad, jac = tape.gradient(loss, p), tape.jacobian(y, p)
    assert tj.tape_cache_info()["rerolled"] == before + 2
    want = tj.grad(lambda p: np.sum(unrolled(p) ** 2), backend="interpret")(x)
    np.testing.assert_allclose(grad, want, rtol=1e-12)
    np.testing.assert_allclose(jac, tj.jacobian(unrolled, backend="interpret")(x), rtol=1e-12)
