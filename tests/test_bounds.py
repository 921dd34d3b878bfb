"""Traced indices out of range raise numpy's IndexError (`tj.IndexOutOfBoundsError`) on every
tier: the interpreter (a first call) and the compiled program (its index checks write status
slots of the size table; compile.py raises after the call), on the first call and on later
ones, with the user's line, the index as written, the axis and its length. The checks never
let an index touch memory (tests/bounds_memcheck.py runs them under valgrind);
`TAPEJIT_BOUNDSCHECK=0` leaves them out of the generated source.

Each program runs in both first-call tiers (`tier`): "compile" (the suite's default: the first
call compiles, with the LLVM lowering) and "interpret" (numba's tier, TAPEJIT_CODEGEN=numba:
the first call runs on the interpreter, the second compiles with numba).
"""
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit.errors import IndexOutOfBoundsError
from tapejit.ops import index as I
from tapejit.ops import sort as ST
from tapejit.transforms import first_call
from hang import HANG_S


@pytest.fixture(params=["compile", "interpret"])
def tier(request, monkeypatch):
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", request.param)
    if request.param == "interpret":      # the first call interpreted, the second compiled
        monkeypatch.setenv("TAPEJIT_CODEGEN", "numba")
        monkeypatch.setattr(first_call, "MAX_INTERPRETED_CALLS", 1)
    config.reload()
    yield request.param
    monkeypatch.undo()
    config.reload()


def _line(fn, offset=0):
    return f"{os.path.basename(__file__)}:{fn.__code__.co_firstlineno + offset}"


def _raises(f, args, index, axis, size, where, op="check_index"):
    with pytest.raises(IndexError) as info:
        f(*args)
    err = info.value
    assert isinstance(err, IndexOutOfBoundsError) and isinstance(err, tj.IndexingError)
    message = str(err)
    assert message.startswith(f"index {index} is out of bounds for axis {axis} with size "
                              f"{size} ({op} at "), message
    assert message.split(" at ", 1)[1].split(")")[0].endswith(where), message
    return err


def _raised_by(err):
    """The module whose code raised `err`: compile.py for a compiled program's status slots,
    interpret.py for the interpreter."""
    tb = err.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return os.path.basename(tb.tb_frame.f_code.co_filename)


def _every_call(f, good, bad, expect, reference=None):
    """`bad` raises on the first call (on the interpreter in the "interpret" tier), and on the
    compiled program after `good` ran (interpreted or compiled, then compiled: the fast path);
    `good` still gives `reference` afterwards (the status slots are cleared)."""
    first = _raises(f, bad, *expect)
    interpreted = config.config().first_call == "interpret"
    assert _raised_by(first) == ("interpret.py" if interpreted else "compile.py")
    want = f(*good) if reference is None else reference
    for _ in range(2):
        np.testing.assert_allclose(f(*good), want)
        assert _raised_by(_raises(f, bad, *expect)) == "compile.py"
    np.testing.assert_allclose(f(*good), want)


def _gather(a, i):
    return a[i] * 2.0


@pytest.mark.parametrize("bad", [7, 10**12, -4])
def test_scalar_index_past_either_end(tier, bad):
    f = tj.jit(_gather)
    a = np.arange(3.0)
    _every_call(f, (a, -3), (a, bad), (bad, 0, 3, _line(_gather, 1)), reference=0.0)


def test_the_interpreter_backend_raises_the_same_error():
    f, g = tj.jit(_gather, backend="interpret"), tj.jit(_gather)
    a = np.arange(3.0)
    errors = [_raises(h, (a, 7), 7, 0, 3, _line(_gather, 1)) for h in (f, g)]
    assert str(errors[0]) == str(errors[1])


def _cross_entropy(w, x, labels):
    z = x @ w
    p = np.exp(z - z.max(axis=1, keepdims=True))
    return -np.sum(np.eye(3)[labels] * np.log(p / p.sum(axis=1, keepdims=True)))


def test_one_hot_labels_in_a_gradient(tier):
    f = tj.grad(_cross_entropy)
    w, x = np.ones((2, 3)), np.arange(8.0).reshape(4, 2)
    _every_call(f, (w, x, np.array([0, 1, 2, 1])), (w, x, np.array([0, 3, 2, 1])),
                (3, 0, 3, _line(_cross_entropy, 3)))


def _take(a, idx):
    return np.take(a, idx) + np.take(a.reshape(1, -1), idx, axis=1)[0]


def _take_along(x, idx):
    return np.take_along_axis(x, idx, axis=1)


def _two_axes(x, i, j):
    return x[i, j]           # i * 4 + j is in range for j = 5: each axis is checked


@pytest.mark.parametrize("fn, good, bad, expect", [
    (_take, (np.arange(3.0), np.array([1, 2])), (np.arange(3.0), np.array([1, 9])), (9, 0, 3)),
    (_take_along, (np.ones((3, 4)), np.array([[0], [3], [-4]])),
     (np.ones((3, 4)), np.array([[0], [4], [2]])), (4, 1, 4)),
    (_two_axes, (np.ones((3, 4)), np.array([0, 2]), np.array([3, -4])),
     (np.ones((3, 4)), np.array([0, 1]), np.array([5, 1])), (5, 1, 4)),
    (_two_axes, (np.ones((3, 3)), np.array([0, 2]), np.array([2, 0])),
     (np.ones((3, 3)), np.array([3, 1]), np.array([0, 1])), (3, 0, 3)),
], ids=["take", "take_along_axis", "two_axes", "square"])
def test_gathers(tier, fn, good, bad, expect):
    _every_call(tj.jit(fn), good, bad, expect + (_line(fn, 1),))


def _add_at(x, idx):
    y = x * 0.0
    np.add.at(y, idx, 1.0)
    return y


def _assign(x, idx):
    x = x * 1.0
    x[idx] += 2.0
    x[idx] = 1.0
    return x


def test_scatters(tier):
    x = np.ones(4)
    _every_call(tj.jit(_add_at), (x, np.array([1, -1])), (x, np.array([1, 4])),
                (4, 0, 4, _line(_add_at, 2)))
    _every_call(tj.jit(_assign), (x, np.array([1, -1])), (x, np.array([1, -5])),
                (-5, 0, 4, _line(_assign, 2)))


def _sum_of_squares(x, idx):
    return np.sum(x[idx] ** 2)


def test_gradient_of_a_gather(tier):
    """The reverse sweep scatters the cotangent through the same (checked) indices."""
    x = np.arange(4.0)
    f = tj.grad(_sum_of_squares)
    _every_call(f, (x, np.array([3, 3])), (x, np.array([0, 4])),
                (4, 0, 4, _line(_sum_of_squares, 1)), reference=np.array([0.0, 0, 0, 12]))


def _searched(a, edges, v):
    return a[np.searchsorted(edges, v)]       # n (past the last edge) is out of range


def test_searchsorted_results_as_indices(tier):
    a, edges = np.arange(3.0), np.array([0.0, 1.0, 2.0])
    _every_call(tj.jit(_searched), (a, edges, np.array([0.5, -1.0])),
                (a, edges, np.array([0.5, 9.0])), (3, 0, 3, _line(_searched, 1)))


def _pick(x, i):
    return x[i]


def test_vmap_of_a_gather(tier):
    """Per-example indices into a shared operand, and into per-example rows (take_along)."""
    x = np.arange(12.0).reshape(3, 4)
    shared = tj.jit(tj.vmap(_pick, in_axes=(None, 0)))
    _every_call(shared, (x[0], np.array([0, 3, -1])), (x[0], np.array([0, 4, 1])),
                (4, 0, 4, _line(_pick, 1)))
    rows = tj.jit(tj.vmap(_pick))
    _every_call(rows, (x, np.array([0, 3, -1])), (x, np.array([0, -5, 1])),
                (-5, 0, 4, _line(_pick, 1)))


def _loop_sum(x, idx):
    return tj.fori_loop(0, 3, lambda k, c: c + x[idx[k]], 0.0)


def _scan_sum(x, idx):
    return tj.scan(lambda c, i: (c + x[i], c), 0.0, idx)[0]


def test_gathers_in_loop_bodies(tier):
    x = np.arange(3.0)
    _every_call(tj.jit(_loop_sum), (x, np.array([0, 1, 2])), (x, np.array([0, 1, 3])),
                (3, 0, 3, _line(_loop_sum, 1)))
    _every_call(tj.jit(_scan_sum), (x, np.array([0, 1, 2])), (x, np.array([0, -9, 1])),
                (-9, 0, 3, _line(_scan_sum, 1)))


def test_empty_axes_and_empty_indices(tier):
    f = tj.jit(_pick)
    _raises(f, (np.ones(0), 0), 0, 0, 0, _line(_pick, 1))
    _raises(f, (np.ones(0), np.array([-1])), -1, 0, 0, _line(_pick, 1))
    for _ in range(3):          # no index: nothing to check
        assert f(np.ones(3), np.zeros(0, np.int64)).shape == (0,)
        assert f(np.ones((0, 2)), np.zeros((0,), np.int64)).shape == (0, 2)
    g = tj.jit(_pick)
    _every_call(g, (np.ones((1, 4)), -1), (np.ones((1, 4)), 1), (1, 0, 1, _line(_pick, 1)))


def test_the_primitives_check_their_own_reads(tier):
    """take, scatter_add, take_along and scatter_add_along on unchecked traced indices (the
    internal gathers: batching, sorting, reverse sweeps) name themselves and their axis."""
    x, u = np.arange(6.0).reshape(2, 3), np.ones((2, 2))
    cases = [
        (lambda x, i: I.take(x, i, axis=1), (x, np.array([0, 2])), (x, np.array([0, 3])),
         (3, 1, 3), "take"),
        (lambda x, i: I.scatter_add(x, i, u, axis=1), (x, np.array([2, 2])),
         (x, np.array([-1, 0])), (-1, 1, 3), "scatter_add"),
        (lambda x, i: ST.take_along(x, i, axis=1), (x, np.array([[0, 2], [1, 1]])),
         (x, np.array([[0, 2], [3, 1]])), (3, 1, 3), "take_along"),
        (lambda u, i: ST.scatter_add_along(i, u, axis=1, size=3),
         (u, np.array([[0, 2], [1, 1]])), (u, np.array([[0, 2], [1, 7]])), (7, 1, 3),
         "scatter_add_along"),
    ]
    for fn, good, bad, expect, op in cases:
        f = tj.jit(fn)
        where = _line(fn)
        _raises(f, bad, *expect, where, op=op)
        f(*good)
        f(*good)
        _raises(f, bad, *expect, where, op=op)


def test_the_error_pickles_and_names_its_parts():
    err = IndexOutOfBoundsError(7, 1, 3, "take", ("model.py", 12))
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and (again.index, again.axis, again.size) == (7, 1, 3)
    assert str(err).startswith("index 7 is out of bounds for axis 1 with size 3 (take at "
                               "model.py:12)")


def _source(monkeypatch, setting):
    monkeypatch.setenv("TAPEJIT_BOUNDSCHECK", setting)
    config.reload()
    return tj.explain(_take_along, grad=False)(np.ones((3, 4)), np.zeros((3, 2), np.int64)).source


def test_opt_out_leaves_the_checks_out_of_the_source(monkeypatch):
    checked, unchecked = _source(monkeypatch, "1"), _source(monkeypatch, "0")
    assert "out of range" in checked and "S[" in checked
    assert "out of range" not in unchecked and checked != unchecked     # cache keys differ
    f = tj.jit(_take_along)                 # in range, the unchecked program is right
    x, idx = np.arange(12.0).reshape(3, 4), np.array([[0], [3], [-4]])
    for _ in range(2):
        np.testing.assert_array_equal(f(x, idx), np.take_along_axis(x, idx % 4, 1))
    monkeypatch.undo()
    config.reload()


def test_cuda_runs_the_checks_on_the_host(tmp_path):
    """The CUDA backend runs the gathers and check_index on the host (`cuda=HOST`), through
    the interpreter's checked code: the same error, on numba's simulator."""
    pytest.importorskip("numba.cuda")
    script = textwrap.dedent("""
        import numpy as np, tapejit as tj
        from tapejit.ops import OPS, HOST
        assert all(OPS[op].cuda == HOST for op in
                   ("check_index", "take", "scatter_add", "take_along", "scatter_add_along"))
        f = tj.jit(lambda a, i: a[i] * 2.0, backend="cuda")
        a = np.arange(3.0)
        assert float(f(a, 1)) == 2.0
        for _ in range(2):
            try:
                f(a, 7)
            except tj.IndexOutOfBoundsError as err:
                print("raised:", err)
        """)
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", TAPEJIT_CACHE_DIR=str(tmp_path / "c"))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("raised: index 7 is out of bounds for axis 0 with size 3 "
                             "(check_index at <string>:6)") == 2, proc.stdout


def _driver(tmp_path, *args, **env):
    driver = os.path.join(os.path.dirname(__file__), "bounds_memcheck.py")
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(tmp_path / "c"), NUMBA_BOUNDSCHECK="1", **env)
    return subprocess.run([sys.executable, driver, "range", *args], env=env,
                          capture_output=True, text=True, timeout=HANG_S)


def test_numba_bounds_check_sees_no_access_out_of_range(tmp_path):
    """A second oracle: numba's own bounds check on every array access of the numba
    generator's programs (NUMBA_BOUNDSCHECK=1) never fires for the out-of-range programs of
    tests/bounds_memcheck.py: each raises tapejit's error first. Without tapejit's checks it
    does fire (the control: it sees the accesses)."""
    proc = _driver(tmp_path, TAPEJIT_CODEGEN="numba")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "32 out-of-range calls raised, 0 did not" in proc.stdout, proc.stdout
    control = _driver(tmp_path, "--only", "take_along", TAPEJIT_BOUNDSCHECK="0",
                      TAPEJIT_CODEGEN="numba")
    assert "FAIL take_along: numba's bounds check" in control.stdout, control.stdout


def test_selfcheck_calls_programs_with_an_index_out_of_range():
    """`tapejit selfcheck` moves one entry of an index argument out of range: numpy raises,
    and so must jit and grad on both backends and a new transform's first call."""
    from tapejit.tools import selfcheck
    programs = [selfcheck.generate(selfcheck.program_seed(33, k)) for k in (1, 6, 11)]
    checked = 0
    for program in programs:
        assert any(a.bound is not None for a in program.args), program.source
        failure, checker = selfcheck.check(program, 0)
        assert failure is None, failure.text()
        checked += checker.out_of_range
    assert checked >= 2


def test_cost_bench_runs():
    """bench/boundscheck.py (the checks' cost) on its smallest gather workload."""
    bench = os.path.join(os.path.dirname(__file__), os.pardir, "bench")
    proc = subprocess.run([sys.executable, "boundscheck.py", "--quick", "--repeats", "1",
                           "--workloads", "embedding"], cwd=bench, capture_output=True,
                          text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "check embedding gradient, checked against unchecked: ok" in proc.stdout
    assert "ratio embedding: checked / unchecked = " in proc.stdout
    assert "| embedding | yes |" in proc.stdout, proc.stdout


def test_a_failed_check_ends_a_while_loop(tmp_path):
    """The loop's condition reads a gathered value whose read was skipped: the loop stops on
    the status slot (else it spins: x[i] * 0.0 never moves the carry) and the call raises.
    In a child process, so that a regression fails on its timeout rather than hanging."""
    script = textwrap.dedent("""
        import numpy as np, tapejit as tj
        f = tj.jit(lambda x, i: tj.while_loop(lambda c: c + x[i] * 0.0 < 5.0,
                                              lambda c: c * 1.0, 0.0))
        for i in (7, -4):
            try:
                f(np.arange(3.0), i)
            except tj.IndexOutOfBoundsError as err:
                print(str(err).split(" (")[0])
        """)
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(tmp_path / "c"))
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=HANG_S)
    assert proc.stdout.splitlines() == [
        "index 7 is out of bounds for axis 0 with size 3",
        "index -4 is out of bounds for axis 0 with size 3"], proc.stdout + proc.stderr[-2000:]
