"""The numba backend against the numpy interpreter.

Compiling costs seconds per program, so the op table's rows (every primitive, numpy function,
method and operator) are checked in combined programs: each sums the outputs of a chunk of rows,
weighted by random arrays, so one compiled forward and reverse sweep exercises the whole chunk
(and the fusion of unrelated rows into shared loop nests): in float64 each row's first and last
sample (broadcasts of equal lengths), in float32 the primitives' rows, and to second order the
rows that check it, on a first and a later call. tapejit's LLVM lowering compiles every chunk
(checked) but the one calling a user's numba kernel, which numba compiles. A program that fails
to compile would run on the interpreter with a warning: here that is an error. Cache behaviour is checked
by counting events (traces, compiles, disk loads), never by timing.
"""
import dataclasses
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapejit as tj
from op_db import ROWS, combined
from zoo import ZOO

CHUNK = 24


def _chunks(rows: list) -> list[list]:
    """`rows` in chunks of CHUNK, but a user's numba kernel (only numba compiles a program that
    calls one) in a chunk of its own, so that the other rows' programs take the LLVM lowering."""
    own = [r for r in rows if r.prim == "njit_call"]
    rest = [r for r in rows if r.prim != "njit_call"]
    return [rest[i:i + CHUNK] for i in range(0, len(rest), CHUNK)] + ([own] if own else [])


CHUNKS = _chunks(ROWS)
PRIMITIVES = [r for r in ROWS if r.prim is not None]
F32_CHUNKS = _chunks(PRIMITIVES)
GRAD2_ROWS = [r for r in ROWS if r.grad2]
GRAD2_CHUNKS = _chunks(GRAD2_ROWS)
# float64: every row, its first and last sample (broadcasts of equal lengths); float32: the
# primitives' rows, their first sample
CASES = [(rows, "float64", (0, -1)) for rows in CHUNKS] + \
    [(rows, "float32", (0,)) for rows in F32_CHUNKS]

# a program numba cannot compile would run on the interpreter with a warning: here, a failure
pytestmark = [pytest.mark.filterwarnings("error::tapejit.TapejitWarning"),
              pytest.mark.usefixtures("shared_cache")]


def _agree(got, want, single: bool) -> None:
    """Compiled and interpreted results agree (to float32's precision where the program
    computes in float32: reductions sum in another order)."""
    got, want = tj.pytree.flatten(got)[0], tj.pytree.flatten(want)[0]
    assert len(got) == len(want)
    tol = 2e-5 if single else 1e-10
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w)
        scale = max(1.0, float(np.max(np.abs(w), initial=0.0)))
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale)


def _single(fn, args) -> bool:
    return any(o.aval.dtype == np.float32 for e in tj.make_tape(fn)(*args).eqns for o in e.outs)


@pytest.mark.parametrize("rows, dtype, picks", CASES,
                         ids=[f"{rows[0].name}..{rows[-1].name}-{dtype}"
                              for rows, dtype, _ in CASES])
def test_op_rows_compiled_match_interpreter(rows, dtype, picks):
    """Values and gradients of a chunk of rows, on the first and a later call."""
    fn, args = combined(rows, dtype, picks)
    argnums = tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f")
    compiled = tj.value_and_grad(fn, argnums=argnums, backend="numba")
    want = tj.value_and_grad(fn, argnums=argnums, backend="interpret")(*args)
    for _ in range(2):
        _agree(compiled(*args), want, _single(fn, args))
    info = compiled.cache_info()
    assert info["traces"] == 1
    if all(r.prim != "njit_call" for r in rows):    # tapejit's LLVM lowering covers every op
        assert info["codegen"] == {"llvm": 1, "numba": 0}


@pytest.mark.parametrize("rows", GRAD2_CHUNKS, ids=lambda rows: f"{rows[0].name}..")
def test_op_rows_second_order_compiled(rows):
    """The gradient of <grad(f), w> for the rows checked to second order, compiled."""
    fn, args = combined(rows)
    argnums = tuple(range(len(args)))
    weights = [np.random.default_rng(k).uniform(0.5, 1.5, np.shape(a)) for k, a in
               enumerate(args)]
    inner = tj.grad(fn, argnums=argnums, backend="numba")

    def first(*xs):
        return sum(np.sum(g * w) for g, w in zip(inner(*xs), weights))

    want = tj.grad(first, argnums=argnums, backend="interpret")(*args)
    compiled = tj.grad(first, argnums=argnums, backend="numba")
    for _ in range(2):
        _agree(compiled(*args), want, _single(fn, args))
    if all(r.prim != "njit_call" for r in rows):
        assert compiled.cache_info()["codegen"] == {"llvm": 1, "numba": 0}


COMPILED_ZOO = [p for p in ZOO if p.name != "euler_pendulum_20"]   # 700 eqns: 10 s to compile


@pytest.mark.parametrize("prog", COMPILED_ZOO, ids=lambda p: p.name)
def test_zoo_compiled_matches_interpreter(prog):
    args = prog.make_args(np.float64)
    compiled = tj.value_and_grad(prog.fn, argnums=prog.argnums, has_aux=prog.has_aux,
                                 backend="numba")
    interpreted = tj.value_and_grad(prog.fn, argnums=prog.argnums, has_aux=prog.has_aux)
    got, want = compiled(*args), interpreted(*args)
    got_leaves, want_leaves = tj.pytree.flatten(got)[0], tj.pytree.flatten(want)[0]
    assert len(got_leaves) == len(want_leaves)
    for a, b in zip(got_leaves, want_leaves):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def _loss(w, x, y, lr):
    return np.mean((np.tanh(x @ w) - y) ** 2) * lr


def test_cache_events_count_traces_and_compiles():
    step = tj.value_and_grad(_loss, backend="numba")
    rng = np.random.default_rng(0)
    w, x, y = rng.random((4, 2)), rng.random((8, 4)), rng.random((8, 2))
    step(w, x, y, 0.1)
    first = step.cache_info()
    assert (first["traces"], first["compiles"] + first["disk_loads"]) == (1, 1)
    step(w, x, y, 0.1)
    assert step.cache_info()["traces"] == 1 and step.cache_info()["hits"] == 1
    step(w, x, y, 0.05)                        # a new learning rate is a run-time value
    assert step.cache_info()["traces"] == 1
    x2, y2 = rng.random((32, 4)), rng.random((32, 2))
    value, grad = step(w, x2, y2, 0.1)         # a new batch size: re-trace, same program
    info = step.cache_info()
    assert info["traces"] == 2 and info["compiles"] + info["disk_loads"] == 1
    assert "shapes/dtypes" in info["last_miss"]
    np.testing.assert_allclose(grad, tj.grad(_loss)(w, x2, y2, 0.1), rtol=1e-12)
    f32 = [a.astype(np.float32) for a in (w, x2, y2)]
    value32, grad32 = step(*f32, 0.1)          # a new dtype: a new program
    assert grad32.dtype == np.float32
    assert step.cache_info()["compiles"] + step.cache_info()["disk_loads"] == 2


def test_warm_disk_cache_in_a_fresh_process(tmp_path):
    script = textwrap.dedent("""
        import numpy as np, tapejit as tj
        def loss(w, x):
            return np.sum(np.sin(x @ w) ** 2)
        g = tj.grad(loss, backend="numba")
        w, x = np.ones((3, 2)), np.arange(12.0).reshape(4, 3)
        assert np.allclose(g(w, x), tj.grad(loss)(w, x))
        info = g.cache_info()
        print(info["compiles"], info["disk_loads"])
    """)
    env = {**os.environ, "TAPEJIT_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split() for _ in range(2)]
    assert runs == [["1", "0"], ["0", "1"]]


def test_disable_jit_forces_the_interpreter(monkeypatch):
    monkeypatch.setenv("TAPEJIT_DISABLE_JIT", "1")
    from tapejit import config
    config.reload()
    g = tj.value_and_grad(_loss, backend="numba")
    g(np.ones((2, 2)), np.ones((3, 2)), np.ones((3, 2)), 1.0)
    assert g.cache_info()["compiles"] == 0


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(tj.ArgumentError, match="unknown backend") as err:
        tj.grad(_loss, backend="gpu")
    assert "test_numba_backend.py" in str(err.value)


def test_a_program_numba_cannot_compile_runs_on_the_interpreter(monkeypatch):
    from tapejit.ops import OPS
    from tapejit.ops import reduce as R
    monkeypatch.setitem(OPS, R.cumsum.name, dataclasses.replace(R.cumsum, cpu=None))
    g = tj.grad(lambda x: np.sum(np.cumsum(x) ** 2), backend="numba")
    x = np.arange(1.0, 5.0)
    with pytest.warns(tj.TapejitWarning, match="could not compile") as record:
        grad = g(x)
    assert "test_numba_backend.py" in record[0].filename
    np.testing.assert_allclose(grad, tj.grad(lambda x: np.sum(np.cumsum(x) ** 2),
                                             backend="interpret")(x))
    assert g.cache_info()["compiles"] == 0


def test_numba_is_the_default_backend(monkeypatch):
    from tapejit import config
    from tapejit.backends import default_backend
    monkeypatch.delenv("TAPEJIT_BACKEND", raising=False)
    monkeypatch.delenv("TAPEJIT_DISABLE_JIT", raising=False)
    config.reload()
    assert default_backend(None) == "numba"
    monkeypatch.setenv("TAPEJIT_DISABLE_JIT", "1")
    config.reload()
    assert default_backend("numba") == "interpret"


# ---- buffer planning ---------------------------------------------------------------------------
ALIASED = """{ lambda x:f64[3,4] .
  let v1:f64[3,4] = sin x
      v2:f64[12] = reshape[shape=(12,)] v1
      v5:f64[] = reduce_prod[axes=(0, 1)] x
      v6:f64[3,4] = mul x v5
      v7:f64[12] = reshape[shape=(12,)] v6
      v8:f64[12] = add v2 v7
      v9:f64[12] = exp v8
      v10:f64[12] = mul v9 2.0:f64[]
      v11:f64[3,4] = reshape[shape=(3, 4)] v10
      v12:f64[3,4] = cos v11
  in ( v12 ) }"""


def test_dead_buffers_are_reused_but_not_while_a_view_of_them_lives():
    from tapejit.compile import executable
    from tapejit.interpret import interpret
    from tapejit.passes import optimize
    tape = optimize(tj.parse_tape(ALIASED))
    program = executable(tape, "numba")
    # v6 must not take v1's buffer (v2, a view of it, is read later): a slice of the
    # workspace; v12, an output, is a new array (never the workspace, nor a dead slice of it)
    assert "v6 = W[" in program.source and "v12 = np.empty" in program.source
    x = np.random.default_rng(0).uniform(0.5, 1.0, (3, 4))
    np.testing.assert_allclose(program([x])[0], interpret(tape, [x])[0], rtol=1e-14)


def _tanh_loss(w, x):
    return np.sum(np.tanh(x @ w) ** 2)


def test_outputs_are_new_arrays_the_next_call_leaves_alone():
    """Temporaries live in a workspace kept between calls; outputs never do."""
    f = tj.value_and_grad(_tanh_loss, backend="numba")
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(6, 4)), rng.normal(size=(4, 3))
    value, grad = f(w, x)
    kept = (float(value), grad.copy())
    f(2 * w, x + 1)
    assert float(value) == kept[0]
    np.testing.assert_array_equal(grad, kept[1])
    np.testing.assert_allclose(grad, tj.grad(_tanh_loss, backend="interpret")(w, x), rtol=1e-12)


def test_a_training_step_fed_its_own_outputs_matches_the_interpreter():
    """Each step's outputs are the next step's inputs: no output may share a buffer with the
    workspace, even one a dead temporary passed on to it (it did: Adam's new moments took a
    workspace buffer through a reused one, and the demo trained to 93% instead of 97%)."""
    from tapejit import optimizers
    from tapejit.tools import demo
    rng = np.random.default_rng(0)
    params = demo.init_params(rng)
    x, y = rng.random((64, 64)), np.eye(10)[rng.integers(0, 10, 64)]
    opt = optimizers.Adam(optimizers.warmup(optimizers.cosine_decay(3e-3, 500), 20))
    steps = [demo.make_train_step(opt, backend) for backend in ("numba", "interpret")]
    runs = [(params, opt.init(params)) for _ in steps]
    for _ in range(3):
        runs = [step(p, state, x, y)[:2] for step, (p, state) in zip(steps, runs)]
    for name in params:
        np.testing.assert_allclose(runs[0][0][name], runs[1][0][name], rtol=1e-9, atol=1e-12)
    workspace = next(iter(steps[0]._cache.values())).run.workspace
    outputs = tj.pytree.flatten(steps[0](params, opt.init(params), x, y))[0]
    assert workspace and not any(np.shares_memory(o, w) for o in outputs for w in workspace)


# ---- parallel loops ----------------------------------------------------------------------------
PARALLEL_ZOO = [p for p in ZOO if p.name in ("layer_norm", "lennard_jones")]


@pytest.mark.parametrize("prog", PARALLEL_ZOO, ids=lambda p: p.name)
def test_parallel_loops_match_the_interpreter(prog, monkeypatch):
    """Every nest large enough (here: any) runs on threads where that is safe; reductions
    over the outermost axis of a parallel nest add per-thread partial sums."""
    from tapejit import config
    monkeypatch.setenv("TAPEJIT_PARALLEL_MIN_SIZE", "1")
    config.reload()
    args = prog.make_args(np.float64)
    parallel = tj.value_and_grad(prog.fn, argnums=prog.argnums, backend="numba")
    assert "numba.prange" in tj.explain(parallel)(*args).source
    got = tj.pytree.flatten(parallel(*args))[0]
    want = tj.pytree.flatten(tj.value_and_grad(prog.fn, argnums=prog.argnums)(*args))[0]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def _outer_reductions(x, w):
    """Reductions over the outer axis of a nest into arrays (sum, max, min), flat and with an
    inner stage (row by row): each chunk of the outer loop keeps its own partial result."""
    s = np.tanh(x * w)
    col = np.sum(s, axis=0)                       # (width, 3): over the outer axis
    top = np.max(s, axis=0)
    low = np.min(np.sum(s, axis=-1), axis=0)      # (width,): after an inner stage
    return np.sum(col * top) + np.sum(np.sin(low)) + np.sum(s * s)


@pytest.mark.parametrize("outer", [1, 2, 3, 16])     # 3: the coordinates' length too
@pytest.mark.parametrize("width", [7, 20])      # 20: a row not of a fixed size (by rows)
def test_outer_axis_reductions_on_threads_match_the_interpreter(outer, width, monkeypatch):
    from tapejit import config
    monkeypatch.setenv("TAPEJIT_PARALLEL_MIN_SIZE", "1")
    config.reload()
    rng = np.random.default_rng(outer)
    args = (rng.normal(size=(outer, width, 3)), rng.normal(size=3))
    compiled = tj.value_and_grad(_outer_reductions, argnums=(0, 1), backend="numba")
    source = tj.explain(compiled)(*args).source
    assert "numba.prange" in source and "_p[" in source     # partial results per chunk
    want = tj.pytree.flatten(tj.value_and_grad(_outer_reductions, argnums=(0, 1))(*args))[0]
    for threads in (1, 2, 3, 8):
        tj.set_num_threads(threads)
        try:
            got = tj.pytree.flatten(compiled(*args))[0]
        finally:
            tj.set_num_threads(None)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


# ---- nests run row by row ----------------------------------------------------------------------
def _row_reductions(x, w):
    """Nests of two or more loops with inner stages (codegen runs them row by row), holding
    every kind of reduction: over the inner axes (max, sum), the row, the outer axis, all."""
    s = x * w
    m = np.max(s, axis=-1, keepdims=True)
    z = np.sum(np.exp(s - m), axis=-1)
    lse = np.log(z) + m[..., 0]
    col = np.sum(lse, axis=0)
    row = np.min(lse, axis=1)
    return np.sum(col * col) + np.sum(np.sin(row)) + np.sum(x * x * lse[..., None])


@pytest.mark.parametrize("threads", ["serial", "parallel"])
def test_row_by_row_nests_match_the_interpreter(threads, monkeypatch):
    from tapejit import config
    monkeypatch.setenv("TAPEJIT_PARALLEL_MIN_SIZE", "1" if threads == "parallel" else "0")
    config.reload()
    rng = np.random.default_rng(3)
    args = (rng.normal(size=(5, 7, 3)), rng.normal(size=3))
    compiled = tj.value_and_grad(_row_reductions, argnums=(0, 1), backend="numba")
    source = tj.explain(compiled)(*args).source
    assert "r_" in source and ("numba.prange" in source) == (threads == "parallel")
    got = tj.pytree.flatten(compiled(*args))[0]
    want = tj.pytree.flatten(tj.value_and_grad(_row_reductions, argnums=(0, 1))(*args))[0]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_the_shared_matmul_helper_reads_transposes_in_place():
    import numba
    from tapejit.codegen import blas

    @numba.njit
    def products(a, b, c, d, out):
        blas.matmul(a, b, out[0], False, False, 2)
        blas.matmul(c, b, out[1], True, False, 2)
        blas.matmul(a, d, out[2], False, True, 2)
        blas.matmul(c, d, out[3], True, True, 2)

    rng = np.random.default_rng(3)
    for dtype, rtol in ((np.float64, 1e-13), (np.float32, 1e-5)):
        a, b, c, d = (rng.normal(size=s).astype(dtype) for s in ((5, 4), (4, 3), (4, 5), (3, 4)))
        out = np.empty((4, 5, 3), dtype)
        products(a, b, c, d, out)
        for got, want in zip(out, (a @ b, c.T @ b, a @ d.T, c.T @ d.T)):
            np.testing.assert_allclose(got, want, rtol=rtol)
    out = np.full((2, 3), np.nan)
    blas.matmul(np.empty((2, 0)), np.empty((0, 3)), out, False, False, 2)   # an empty sum: zeros
    assert not out.any()
