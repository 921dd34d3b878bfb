"""LAPACK and sorting calls on the llvm path (codegen/llvm/library_calls.py, array_kernels.py):
programs calling codegen/lapack.py's and sorting.py's functions are lowered by tapejit's own
LLVM lowering (`Compiled.codegen == "llvm"`), run compiled from the first call, and equal the
interpreter (here, and through conftest.py's TAPEJIT_VERIFY on every call).

Covered: every lapack function (solve, slogdet, cholesky, eigh, svd reduced and full, qr,
pinv) on stacks of float64 and float32 matrices, first and later calls and a new batch size;
their gradients; 1x1 matrices and empty batches; a failing call (a matrix not positive
definite, a singular one, an SVD of NaN) raising tj.LinAlgError as the interpreter does on the
first and later calls, the program still right afterwards, also where the call is in a scan's
body, a fori loop's or a branch; sort and searchsorted with NaN, ties, signed zeros,
integers; numba's exceptions with run-time arguments; numba's generator where a kernel
cannot be built; a kernel in a new process, loaded from the disk cache.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tapejit as tj
from tapejit.codegen.llvm import array_kernels, library_calls
from tapejit.codegen.llvm.jit import JitError
from tapejit.compile import Compiled

from test_linalg import _everything, _inputs, _weighted
from hang import HANG_S

LinAlgError = np.linalg.LinAlgError
pytestmark = pytest.mark.filterwarnings("error::tapejit.TapejitWarning")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "tjcache"))
    monkeypatch.setenv("TAPEJIT_CODEGEN", "llvm")
    from tapejit import config
    config.reload()
    yield
    monkeypatch.undo()
    config.reload()


def _on_llvm(transform) -> None:
    """Every program `transform` holds is the LLVM lowering's, and no call was interpreted."""
    transform = getattr(transform, "__wrapped_transform__", transform)
    programs = [p.run for p in transform._cache.values()]
    assert programs and all(isinstance(p, Compiled) for p in programs)
    assert {p.codegen for p in programs} == {"llvm"}
    assert transform.cache_info()["interpreted"] == 0


def _same(got, want, rtol: float) -> None:
    got, want = tj.pytree.flatten(got)[0], tj.pytree.flatten(want)[0]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert (g.dtype, g.shape) == (w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, equal_nan=True)


def _check(fn, calls, rtol, transform=tj.jit):
    compiled, interpreted = transform(fn), transform(fn, backend="interpret")
    for args in calls:
        _same(compiled(*args), interpreted(*args), rtol)
    _on_llvm(compiled)


# ---- np.linalg -------------------------------------------------------------------------------
def _all(a, s, t, b):
    """test_linalg's `_everything` and one more output: a program of its own (test_linalg
    counts the compiles of its programs, which share this session's disk cache)."""
    return {**_everything(a, s, t, b), "twice": a * 2}


def _scalar(a, s, t, b):
    return _weighted(a, s, t, b) * 1.5


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_lapack_function_on_stacks(dtype):
    """solve, slogdet, cholesky, eigh, svd, qr, pinv (and what numpy_api builds of them) on
    (2, 3) stacks: the interpreter's values on the first and a later call, and for a new batch
    size, from the program the lowering made."""
    rtol = 1e-9 if dtype == np.float64 else 2e-4
    _check(_all, [_inputs((2, 3), dtype), _inputs((2, 3), dtype, seed=1),
                         _inputs((5, 1), dtype, seed=2)], rtol)


def test_full_svd_and_gradients():
    """svd with full_matrices=True (a scalar argument of the kernel) and the gradient of every
    primitive, compiled on llvm, equal the interpreter's."""
    def full(t):
        u, s, vt = np.linalg.svd(t, full_matrices=True)
        return np.abs(u), s, np.abs(vt)
    _check(full, [_inputs((2,))[2:3]] * 2, 1e-9)
    _check(_scalar, [_inputs((2,))] * 2, 1e-8,
           transform=lambda f, **kw: tj.value_and_grad(f, argnums=(0, 1, 2, 3), **kw))


def test_one_by_one_and_empty_batches():
    """1x1 matrices, and stacks of no matrices (the kernel runs no LAPACK call)."""
    def fn(a, b):
        sign, logdet = np.linalg.slogdet(a)
        return np.linalg.solve(a, b), np.linalg.cholesky(a), np.linalg.eigh(a)[0], sign, logdet
    one = (np.full((3, 1, 1), 2.0), np.ones((3, 1, 2)))
    empty = (np.zeros((0, 2, 2)), np.zeros((0, 2, 1)))
    _check(fn, [one, one], 1e-12)
    _check(fn, [empty, empty], 0)


@pytest.mark.parametrize("fn, bad, op", [
    (lambda a: np.linalg.cholesky(a), -np.eye(3), "cholesky"),
    (lambda a: np.linalg.solve(a, np.ones(2)), np.array([[1.0, 2.0], [2.0, 4.0]]), "solve"),
    (lambda a: np.linalg.svd(a)[1], np.array([[1.0, np.nan], [0.0, 1.0]]), "svd")])
def test_linalg_errors_say_what_the_interpreter_says(fn, bad, op):
    """A failing LAPACK call (numba raises its LinAlgError, with its own message and no line)
    raises tj.LinAlgError as the interpreter does, on the first and a later call: numpy's
    message, the op and the user's line; the same program then computes right (its status
    slot was cleared)."""
    with pytest.raises(LinAlgError) as numpy_error:
        fn(bad)
    with pytest.raises(tj.LinAlgError) as interpreted:
        tj.jit(fn, backend="interpret")(bad)
    text = str(interpreted.value)
    assert text.startswith(f"{str(numpy_error.value).rstrip('.')} ({op} at {__file__}:"), text
    compiled = tj.jit(fn)
    good = np.array([[4.0, 2.0, 0.0], [2.0, 3.0, 0.5], [0.0, 0.5, 2.0]])[:bad.shape[0], :bad.shape[1]]
    for _ in range(2):
        with pytest.raises(tj.LinAlgError) as caught:
            compiled(bad)
        assert str(caught.value) == text
        _same(compiled(good), fn(good), 1e-12)
    _on_llvm(compiled)


def test_numbas_compile_raises_the_same_error(monkeypatch):
    """Where numba compiles the program (the lowering does not cover it, or
    TAPEJIT_CODEGEN=numba), its np.linalg raises numba's LinAlgError itself: the first and a
    later call (the cache's fast path) raise what the interpreter raises."""
    def refuse(call, kinds):
        raise JitError(f"numba cannot compile the kernel {call} (this test)")
    monkeypatch.setattr(library_calls, "array_kernel", refuse)

    def twice(a, b):
        return np.linalg.solve(a, b) * 2.0
    solve, singular, b = tj.jit(twice), np.array([[1.0, 2.0], [2.0, 4.0]]), np.ones(2)
    with pytest.raises(tj.LinAlgError) as interpreted:
        tj.jit(twice, backend="interpret")(singular, b)
    for _ in range(2):
        with pytest.raises(tj.LinAlgError) as caught:
            solve(singular, b)
        assert str(caught.value) == str(interpreted.value)
        _same(solve(np.eye(2), b), 2.0 * b, 0)
    assert solve.cache_info()["codegen"] == {"llvm": 0, "numba": 1}, solve.cache_info()


def test_failure_among_several_calls():
    """Of three choleskys (a Python loop, unrolled), the second fails: the call raises (the
    third never runs), and later calls of the program are right."""
    def fn(a):
        total = 0.0
        for k in range(a.shape[0]):
            total = total + np.sum(np.linalg.cholesky(a[k] * (k + 1.0)))
        return total
    compiled = tj.jit(fn)
    good = np.stack([np.eye(2) * (k + 2) for k in range(3)])
    bad = good.copy()
    bad[1] = -np.eye(2)
    for _ in range(2):
        with pytest.raises(LinAlgError, match="positive definite"):
            compiled(bad)
        np.testing.assert_allclose(compiled(good), fn(good), rtol=1e-12)
    _on_llvm(compiled)


def test_failures_in_loop_bodies_and_branches():
    """Library calls in functions of the module (a scan's body, a fori loop's, a branch) are
    lowered too: values equal the interpreter's; a cholesky failing in the 3rd of 4 scan steps
    raises tj.LinAlgError naming it, on the first and later calls, and the program is right
    afterwards."""
    def chol_scan(a):
        def step(c, x):
            return c + np.sum(np.linalg.cholesky(x) * c), np.linalg.slogdet(x)[1]
        return tj.scan(step, 1.0, a)

    def iterate(a, b):        # x <- x + solve(a, b - a x) / 2, three times (an array carry)
        return tj.fori_loop(0, 3, lambda i, x: x + np.linalg.solve(a, b - a @ x) * 0.5,
                            np.zeros_like(b))

    def branch(a, flag):
        return tj.cond(flag > 0, lambda m: np.sort(m[0]), lambda m: np.linalg.eigh(m)[0],
                       a)
    good = np.stack([np.eye(2) * (k + 2) + 0.5 for k in range(4)])
    _check(chol_scan, [(good,), (good[:3],)], 1e-12)
    a = np.array([[4.0, 1.0], [1.0, 3.0]])
    _check(iterate, [(a, np.array([1.0, 2.0])), (a * 2, np.array([3.0, 1.0]))], 1e-12)
    _check(branch, [(a, 1), (a, 0), (a, 1)], 1e-12)
    compiled, bad = tj.jit(chol_scan), good.copy()
    bad[2] = -np.eye(2)
    for _ in range(2):
        with pytest.raises(LinAlgError) as caught:
            compiled(bad)
        assert str(caught.value).startswith(
            f"Matrix is not positive definite (cholesky at {__file__}:"), str(caught.value)
        _same(compiled(good), chol_scan(good), 1e-12)
    _on_llvm(compiled)


def test_exceptions_with_run_time_values(monkeypatch):
    """An exception numba builds when it is raised (arguments holding the call's values) comes
    back from a kernel with its class and constant arguments, the others marked (numba boxes
    them with its environment, which kernels do not have); a kernel that did not raise runs."""
    monkeypatch.setitem(array_kernels._MODULES, "tj_test", "llvm_kernel_helpers")
    kernel = array_kernels.array_kernel("tj_test.fail", (("array", "f8", 1), ("scalar", "i8")))
    address = array_kernels._programs[kernel.symbol].address(kernel.symbol)
    fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(address)
    x = np.zeros(3)
    assert fn(x.ctypes.data, 3, 1) == 0 and list(x) == [0.0, 1.0, 0.0]
    for k in (7, 3):
        error = array_kernels.raised(fn(x.ctypes.data, 3, k))
        run_time = array_kernels.RUN_TIME
        assert type(error) is ValueError and error.args == ("no row", run_time, run_time)


# ---- sorting ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_sort_and_searchsorted(dtype):
    """Sorts along each axis, argsort (stable: ties keep their order), searchsorted on both
    sides, on values with ties (and for floats NaN, inf and both zeros)."""
    def fn(x, v):
        s = np.sort(x[0, :, 0])
        return (np.sort(x, axis=1), np.argsort(x, axis=0, kind="stable"), np.sort(x, axis=None),
                np.searchsorted(s, v), np.searchsorted(s, v, side="right"))
    rng = np.random.default_rng(0)
    x = rng.integers(-3, 4, (3, 5, 4)).astype(dtype)
    v = np.array([-3, 0, 1, 2, 5, -9], dtype)
    if x.dtype.kind == "f":
        x[0, 1, 2], x[1, 0, 0], x[2, 3, 1], x[0, 4, 3] = np.nan, -0.0, np.inf, -np.inf
        v = np.append(v, [np.nan, -0.0, np.inf]).astype(dtype)
    _check(fn, [(x, v), (x[:, ::-1].copy(), v[::-1].copy())], 0)


def test_a_kernel_numba_cannot_build_leaves_the_program_to_numba(monkeypatch):
    """Where numba cannot compile a kernel, the lowering does not cover the program: numba's
    generator compiles it, and it computes right."""
    def refuse(call, kinds):
        raise JitError(f"numba cannot compile the kernel {call} (this test)")
    monkeypatch.setattr(library_calls, "array_kernel", refuse)
    compiled = tj.jit(lambda x: np.sort(x) * 2.0)
    x = np.array([3.0, -1.0, 2.0, -1.0])
    _same(compiled(x), np.sort(x) * 2.0, 0)
    transform = getattr(compiled, "__wrapped_transform__", compiled)
    assert {p.run.codegen for p in transform._cache.values()} == {"numba"}


def test_kernels_load_in_a_new_process(tmp_path):
    """A second process finds the kernels on disk: its program runs compiled on llvm with no
    numba compile (numba's compiler never builds its CPU target)."""
    script = textwrap.dedent("""
        import numpy as np, tapejit as tj
        f = tj.jit(lambda a, b: (np.linalg.solve(a, b), np.sort(b)))
        a, b = np.eye(3) * 2.0, np.array([3.0, 1.0, 2.0])
        x, s = f(a, b)
        assert np.allclose(x, b / 2) and list(s) == [1.0, 2.0, 3.0]
        import sys
        registry = sys.modules.get("numba.core.registry")    # numba's compiler made a target?
        print([p.run.codegen for p in f._cache.values()],
              registry is not None and "_toplevel_target_context" in vars(registry.cpu_target))
    """)
    env = dict(os.environ, TAPEJIT_CACHE_DIR=str(tmp_path), TAPEJIT_FIRST_CALL="compile",
               TAPEJIT_VERIFY="0", TAPEJIT_CODEGEN="llvm")
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=HANG_S) for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), [r.stderr[-2000:] for r in runs]
    assert runs[1].stdout.split() == ["['llvm']", "False"], runs[1].stdout
