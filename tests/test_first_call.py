"""Tiers: by default a new program's first calls run on the numpy interpreter, as many as the
compile would about pay for, and the next compiles it; one compiled before, whose code is on
disk, loads on its first call (first_call.py `interpreted_calls`, `TAPEJIT_FIRST_CALL`). Most
tests here check numba's tier (TAPEJIT_CODEGEN=numba); the `llvm` ones the default. Tests of
how the tier hands over to compiled code compile on the second call (`_second_call_compiles`).

The rest of the suite sets TAPEJIT_FIRST_CALL=compile (conftest.py) so that its numba tests
check compiled code from the first call on; here it is set per test. Counted by events
(`cache_info()`), never timed.
"""
import json
import os
import subprocess
import sys
import threading

import numba
import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit.codegen.cpu import generate
from tapejit.passes import fused
from tapejit.transforms import first_call
from tapejit.transforms.first_call import INTERPRET_FIRST_MAX_BYTES, interpreted_calls

from hang import HANG_S


@pytest.fixture(autouse=True)
def _settings(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path / "tjcache"))
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", "interpret")
    monkeypatch.setenv("TAPEJIT_CODEGEN", "numba")
    config.reload()
    yield
    monkeypatch.undo()
    config.reload()


def _loss(w, x):
    return np.sum(np.tanh(x @ w) ** 2)


def _args(rng, n=6):
    return rng.normal(size=(3, 2)), rng.normal(size=(n, 3))


def _counts(f):
    info = f.cache_info()
    return {k: info[k] for k in ("traces", "interpreted", "compiles", "disk_loads", "hits")}


def _second_call_compiles(monkeypatch):
    monkeypatch.setattr(first_call, "MAX_INTERPRETED_CALLS", 1)


def _program_tape(f):
    [program] = getattr(f, "__wrapped_transform__", f)._cache.values()
    return program.tape


def test_the_first_calls_are_interpreted_and_the_next_compiles(monkeypatch):
    monkeypatch.setenv("TAPEJIT_VERIFY", "0")     # the bare fast path, not a verifying one
    config.reload()
    f = tj.value_and_grad(_loss, backend="numba")
    reference = tj.value_and_grad(_loss, backend="interpret")
    w, x = _args(np.random.default_rng(0))
    value, grad = f(w, x)
    want_value, want_grad = reference(w, x)
    assert value == want_value and np.array_equal(grad, want_grad)   # the interpreter's bits
    tape = _program_tape(f)
    calls = interpreted_calls(tape)
    assert calls > 1                               # a small program: worth several calls
    assert "fused" not in [e.op for e in tape.eqns]     # what the interpreter runs: unfused
    for k in range(2, calls + 1):
        value, grad = f(w, x)
        assert value == want_value and np.array_equal(grad, want_grad)
    assert _counts(f) == {"traces": 1, "interpreted": calls, "compiles": 0, "disk_loads": 0,
                          "hits": calls - 1}
    value, grad = f(w, x)
    assert _counts(f) == {"traces": 1, "interpreted": calls, "compiles": 1, "disk_loads": 0,
                          "hits": calls}
    np.testing.assert_allclose(value, want_value, rtol=1e-13)
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-15)
    [program] = f._cache.values()                  # compiled from the fused tape
    assert program.run.tape is tape and program.run.source == generate(fused(tape)).source
    # from now on calls take the fast path straight into the compiled function
    [entry] = f._fast.values()
    assert isinstance(entry[1], numba.core.dispatcher.Dispatcher)
    f(w, x)
    assert _counts(f)["hits"] == calls + 1 and _counts(f)["compiles"] == 1


def test_how_many_calls_run_on_the_interpreter():
    """As many as would about pay for the compile, by the tape's estimate: hundreds for a
    scalar function, one where the arrays are large, none with a while loop; a loop of
    constant length counts its steps."""
    scalar = tj.make_tape(lambda x: np.sin(x) * x)(1.0)
    assert first_call.MAX_INTERPRETED_CALLS >= interpreted_calls(scalar) > 100
    small = tj.make_tape(_loss)(*_args(np.random.default_rng(4)))
    assert interpreted_calls(scalar) > interpreted_calls(small) > 100
    large = tj.make_tape(lambda x: np.sum(np.sin(x) * np.exp(-x)))(np.ones(10**6))
    assert interpreted_calls(large) == 1
    body = lambda i, c: np.sin(c) * 1.5      # noqa: E731
    steps = [interpreted_calls(tj.make_tape(lambda x: tj.fori_loop(0, n, body, x))(np.ones(4)))
             for n in (3, 300)]
    assert steps[0] > steps[1] >= 1                 # its steps each cost the interpreter
    looped = tj.make_tape(lambda x: tj.while_loop(lambda c: np.sum(c) < 100.0,
                                                  lambda c: c * 2.0, x))(np.ones(4))
    assert interpreted_calls(looped) == 0           # the steps are not known: compiled at once


def test_a_new_batch_size_of_a_compiled_program_reuses_it_from_its_first_call(monkeypatch):
    _second_call_compiles(monkeypatch)
    f = tj.grad(_loss, backend="numba")
    rng = np.random.default_rng(1)
    w, x = _args(rng)
    f(w, x)
    f(w, x)
    compiled = _counts(f)["compiles"] + _counts(f)["disk_loads"]
    x2 = rng.normal(size=(11, 3))
    want = tj.grad(_loss, backend="interpret")(w, x2)
    for _ in range(2):
        np.testing.assert_allclose(f(w, x2), want, rtol=1e-12, atol=1e-15)   # compiled
    info = _counts(f)
    assert (info["traces"], info["interpreted"]) == (2, 1)
    assert info["compiles"] + info["disk_loads"] == compiled      # the same source: no compile
    assert f.cache_info()["codegen"]["numba"] == 2


def test_compile_mode_compiles_on_the_first_call(monkeypatch):
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", "compile")
    config.reload()
    f = tj.grad(lambda w, x: np.sum(np.sin(x @ w)), backend="numba")
    w, x = _args(np.random.default_rng(2))
    f(w, x)
    assert _counts(f)["interpreted"] == 0 and _counts(f)["compiles"] == 1


def test_eight_threads_making_the_first_calls_trace_interpret_and_compile_once(monkeypatch):
    _second_call_compiles(monkeypatch)
    f = tj.grad(lambda w, x: np.sum(np.cos(x @ w) * x[:, :2]), backend="numba")
    w, x = _args(np.random.default_rng(3))
    want = tj.grad(lambda w, x: np.sum(np.cos(x @ w) * x[:, :2]), backend="interpret")(w, x)
    n = 8
    barrier, results = threading.Barrier(n), [None] * n

    def work(i):
        barrier.wait()
        results[i] = f(w, x)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        np.testing.assert_allclose(r, want, rtol=1e-12, atol=1e-15)
    assert _counts(f) == {"traces": 1, "interpreted": 1, "compiles": 1, "disk_loads": 0,
                          "hits": n - 1}


def test_which_programs_run_their_first_call_on_the_interpreter():
    assert interpreted_calls(tj.make_tape(_loss)(*_args(np.random.default_rng(4))))
    n = int(np.sqrt(INTERPRET_FIRST_MAX_BYTES / 8)) + 1
    huge = np.broadcast_to(np.ones(1), (n, n))  # a large array's shape, not its memory
    assert not interpreted_calls(tj.make_tape(lambda x: np.sum(np.sin(x)))(huge))


def test_an_unknown_first_call_setting_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", "later")
    with pytest.raises(ValueError, match="TAPEJIT_FIRST_CALL='later': expected one of "
                                         "interpret, compile"):
        config.reload()


def test_a_one_gradient_script_never_imports_numba_or_the_compiler():
    """`import tapejit` and a first call on the interpreter load neither numba nor llvmlite nor
    code generation (compile.py and what it imports: a third of the import)."""
    script = ("import sys, numpy as np, tapejit as tj\n"
              "heavy = ('numba', 'llvmlite', 'tapejit.compile', 'tapejit.codegen.cpu',\n"
              "         'tapejit.codegen.llvm')\n"
              "def loaded():\n"
              "    return sorted({m.split('.')[0] if m.startswith(heavy[:2]) else m\n"
              "                   for m in sys.modules if m.startswith(heavy)})\n"
              "print(loaded())\n"
              "g = tj.grad(lambda x: np.sum(np.tanh(x) ** 2), backend='numba')(np.ones(3))\n"
              "print(loaded(), g.shape)")
    env = {k: v for k, v in os.environ.items() if k != "TAPEJIT_FIRST_CALL"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == ["[]", "[] (3,)"]


def _llvm(monkeypatch):
    monkeypatch.setenv("TAPEJIT_CODEGEN", "llvm")
    monkeypatch.setenv("TAPEJIT_VERIFY", "0")     # the bare fast path, not a verifying one
    config.reload()


def _kernels_built(monkeypatch, fn, *args):
    """Build the kernels `fn`'s gradient calls (once per machine) by compiling it first."""
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", "compile")
    config.reload()
    tj.value_and_grad(fn, backend="numba")(*args)
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", "interpret")
    config.reload()


def test_llvm_a_covered_program_is_interpreted_first_where_its_kernels_are_built(monkeypatch):
    """Built kernels do not make a compile worth it: a new program's first call runs on the
    interpreter all the same (a one-gradient script's LLVM compile cost 50 ms)."""
    _llvm(monkeypatch)
    _kernels_built(monkeypatch, _loss, *_args(np.random.default_rng(6)))

    def other_loss(w, x):       # the same kernels (tanh), another program
        return np.sum(np.tanh(x @ w) * 3.0)
    f = tj.grad(other_loss, backend="numba")
    w, x = _args(np.random.default_rng(6))
    np.testing.assert_array_equal(f(w, x), tj.grad(other_loss, backend="interpret")(w, x))
    assert _counts(f)["interpreted"] == 1 and _counts(f)["compiles"] == 0


def test_llvm_a_program_compiled_before_loads_on_its_first_call(monkeypatch):
    _llvm(monkeypatch)
    _kernels_built(monkeypatch, _loss, *_args(np.random.default_rng(6)))
    f = tj.value_and_grad(_loss, backend="numba")
    w, x = _args(np.random.default_rng(6))
    want = tj.value_and_grad(_loss, backend="interpret")(w, x)
    for calls in (1, 2):
        value, grad = f(w, x)
        np.testing.assert_allclose(value, want[0], rtol=1e-13)
        np.testing.assert_allclose(grad, want[1], rtol=1e-12, atol=1e-15)
        info = _counts(f)          # (the warm-up compiled it: a disk load, or the same code)
        assert (info["traces"], info["interpreted"], info["hits"]) == (1, 0, calls - 1)
    [entry] = f._fast.values()
    assert not isinstance(entry[1], numba.core.dispatcher.Dispatcher)


@tj.njit_primitive(vjp=lambda ct, out, x: (3 * ct * x ** 2,))
@numba.njit
def _cube(x):       # a user's numba kernel: numba compiles the programs calling it
    out = np.empty_like(x)
    for i in range(x.size):
        out.flat[i] = x.flat[i] ** 3
    return out


def test_llvm_a_program_numba_compiles_is_still_interpreted_first(monkeypatch):
    _llvm(monkeypatch)
    _second_call_compiles(monkeypatch)
    f = tj.grad(lambda x: np.sum(_cube(x)), backend="numba")
    x = np.array([3.0, 1.0, 4.0, 1.5, 5.0])
    np.testing.assert_array_equal(f(x), 3 * x ** 2)
    assert _counts(f)["interpreted"] == 1 and _counts(f)["compiles"] == 0
    np.testing.assert_allclose(f(x), 3 * x ** 2)
    info = f.cache_info()
    assert info["compiles"] == 1 and info["codegen"] == {"llvm": 0, "numba": 1}


def test_llvm_kernels_not_built_yet_mean_the_interpreter_first(monkeypatch, tmp_path):
    """A program whose kernels numba has not built on this machine runs its first call on the
    interpreter, as a program numba compiles does; its second call builds and compiles."""
    _llvm(monkeypatch)
    _second_call_compiles(monkeypatch)
    monkeypatch.setenv("TAPEJIT_LIBRARY_DIR", str(tmp_path / "library"))    # empty
    config.reload()
    f = tj.grad(lambda x: np.sum(np.arcsinh(x)), backend="numba")   # (a kernel nothing else
    x = np.linspace(-1.0, 1.0, 4)                                   # here loads before)
    np.testing.assert_allclose(f(x), 1 / np.sqrt(1 + x * x), rtol=1e-13)
    assert _counts(f)["interpreted"] == 1 and _counts(f)["compiles"] == 0
    np.testing.assert_allclose(f(x), 1 / np.sqrt(1 + x * x), rtol=1e-13)
    assert f.cache_info()["codegen"] == {"llvm": 1, "numba": 0}, f.cache_info()


def test_llvm_a_warm_process_never_imports_numba(tmp_path):
    """A program compiled before (here under TAPEJIT_FIRST_CALL=compile: the setting does not
    key the disk cache) loads on its first call, without numba."""
    script = ("import sys, numpy as np, tapejit as tj\n"
              "f = tj.grad(lambda x: np.sum(np.tanh(x) ** 2))\n"
              "g, info = f(np.ones(3)), f.cache_info()\n"
              "print('numba' in sys.modules, g.shape, info['interpreted'], info['disk_loads'])")
    env = {**os.environ, "TAPEJIT_CODEGEN": "llvm", "TAPEJIT_CACHE_DIR": str(tmp_path / "c"),
           "TAPEJIT_LIBRARY_DIR": str(tmp_path / "c"), "TAPEJIT_FIRST_CALL": "compile"}
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split()
    assert first[1:] == ["(3,)", "0", "0"]   # it builds the tanh kernel with numba
    env.pop("TAPEJIT_FIRST_CALL")
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, check=True).stdout.split()
    assert second == ["False", "(3,)", "0", "1"]   # it loads the kernel and the program


def test_llvm_a_warm_process_calls_lapack_kernels_without_numba(tmp_path):
    """numba's LAPACK kernels call its memory manager (NRT_*): its extension is loaded alone
    (extensions.py), as numba's helpers are; importing numba cost a GP fit 0.15-0.3 s."""
    script = ("import sys, numpy as np, tapejit as tj\n"
              "def nll(a, y):\n"
              "    k = a @ a.T + 3.0 * np.eye(3)\n"
              "    L = np.linalg.cholesky(k)\n"
              "    z = np.linalg.solve(L, y)\n"
              "    return np.sum(z ** 2) + 2 * np.sum(np.log(np.diag(L)))\n"
              "a, y = np.arange(9.0).reshape(3, 3) / 9, np.array([1.0, -2.0, 0.5])\n"
              "g = [tj.grad(nll)(a + k, y) for k in (0.0, 1.0)]\n"
              "print('numba' in sys.modules, repr(np.concatenate(g).round(12).tolist()))")
    env = {**os.environ, "TAPEJIT_CODEGEN": "llvm", "TAPEJIT_CACHE_DIR": str(tmp_path / "c"),
           "TAPEJIT_LIBRARY_DIR": str(tmp_path / "c"), "TAPEJIT_FIRST_CALL": "compile"}
    first = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, check=True).stdout.split(maxsplit=1)
    env.pop("TAPEJIT_FIRST_CALL")
    second = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, check=True).stdout.split(maxsplit=1)
    assert second == ["False", first[1]], (first, second)


WARM = """
import json, numpy as np, tapejit as tj
import tapejit.compile as C
lowered, lower = [], C.lower
C.lower = lambda *args: lowered.append(1) or lower(*args)

def loss(a, x):      # a LAPACK kernel, a kernel called by address (tanh), a product
    return np.sum(np.tanh(np.linalg.cholesky(a @ a.T + 3 * np.eye(3)) @ x) ** 2)

g = tj.grad(loss, argnums=(0, 1))
out = g(np.arange(9.0).reshape(3, 3) / 10, np.ones((3, 4)))
info = g.cache_info()
print(json.dumps([len(lowered), info["compiles"], info["disk_loads"], info["codegen"],
                  [o.tolist() for o in out]]))
"""


def test_llvm_a_warm_process_neither_lowers_nor_compiles(tmp_path):
    """The program's disk entry holds its object code and what lowering it said: a new
    process loads the kernels it calls and the code, and runs it (checked against the
    interpreter: TAPEJIT_VERIFY) without lowering the module again."""
    env = {**os.environ, "TAPEJIT_CODEGEN": "llvm", "TAPEJIT_CACHE_DIR": str(tmp_path / "c"),
           "TAPEJIT_FIRST_CALL": "compile", "TAPEJIT_VERIFY": "1"}
    runs = [json.loads(subprocess.run([sys.executable, "-c", WARM], env=env, check=True,
                                      capture_output=True, text=True).stdout)
            for _ in range(2)]
    assert runs[0][:4] == [1, 1, 0, {"llvm": 1, "numba": 0}]
    assert runs[1][:4] == [0, 0, 1, {"llvm": 1, "numba": 0}]
    assert runs[1][4] == runs[0][4]


# ---- what a compile says (the `tapejit` logger, TAPEJIT_LOG) ------------------------------------
def _compile_once(f, monkeypatch, log):
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", "compile")
    monkeypatch.setenv("TAPEJIT_LOG", log)
    config.reload()
    return tj.value_and_grad(f)(*_args(np.random.default_rng(5)))


def test_a_slow_compile_is_announced_while_the_user_waits(monkeypatch, caplog):
    monkeypatch.setattr(first_call, "ANNOUNCE_SECONDS", 0.0)     # every compile is "slow"
    with caplog.at_level("WARNING", logger="tapejit"):
        _compile_once(_loss, monkeypatch, "warning")
    assert [r.getMessage() for r in caplog.records] == [
        "tapejit: compiling value_and_grad(_loss) — 18 ops (TAPEJIT_LOG=info shows each compile)"]


def test_a_quick_compile_is_not_announced(caplog, monkeypatch):
    _llvm(monkeypatch)
    _second_call_compiles(monkeypatch)
    monkeypatch.setattr(first_call, "ANNOUNCE_SECONDS", HANG_S)   # quicker, however busy
    f = tj.jit(lambda x: x + 1.0)
    with caplog.at_level("INFO"):        # an application logging at INFO sees each compile
        f(np.ones(3))
        f(np.ones(3))
    assert [(r.levelname, r.getMessage()[:34]) for r in caplog.records] == [
        ("INFO", "tapejit: compiled jit(<lambda>) — ")]


def _events(err: str) -> list[str]:
    """The compiles and disk loads a log reports (not the announcements of slow compiles,
    which depend on the machine's speed)."""
    return [line for line in err.splitlines()
            if line.startswith("tapejit: ") and not line.startswith("tapejit: compiling ")]


def test_log_info_reports_each_compile_and_disk_load(monkeypatch, capfd):
    _compile_once(_loss, monkeypatch, "info")
    [event] = _events(capfd.readouterr().err)
    assert event.startswith("tapejit: compiled value_and_grad(_loss) — 18 ops in ") \
        and event.endswith(" s"), event
    script = ("import numpy as np, tapejit as tj\n"
              "def loss(w, x):\n    return np.sum(np.cos(x @ w) * 3.0)\n"
              "tj.grad(loss)(np.ones((3, 2)), np.ones((4, 3)))\n")
    env = {**os.environ, "TAPEJIT_FIRST_CALL": "compile", "TAPEJIT_LOG": "info"}
    runs = [_events(subprocess.run([sys.executable, "-c", script], env=env, text=True,
                                   capture_output=True, check=True, timeout=HANG_S).stderr)
            for _ in range(2)]
    assert len(runs[0]) == len(runs[1]) == 1, runs
    assert runs[0][0].startswith("tapejit: compiled grad(loss) — 17 ops in "), runs
    assert runs[1][0].startswith("tapejit: loaded from the disk cache grad(loss) — 17 ops"), runs


def test_the_announcement_drops_its_hint_where_compiles_are_reported(monkeypatch, capfd,
                                                                     tmp_path):
    monkeypatch.setattr(first_call, "ANNOUNCE_SECONDS", 0.0)
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))       # a compile, not a disk load
    monkeypatch.setattr(first_call, "_configured", None)   # a handler on this test's stderr

    def tanh_loss(w, x):          # a program no other test loaded (its code would be shared)
        return np.sum(np.tanh(x @ w) * 2.0)
    _compile_once(tanh_loss, monkeypatch, "info")
    said = [line for line in capfd.readouterr().err.splitlines() if line.startswith("tapejit")]
    assert len(said) == 2 and said[0].startswith("tapejit: compiling value_and_grad(tanh_loss)")
    assert said[0].endswith(" ops") and "TAPEJIT_LOG" not in said[0], said
    assert said[1].startswith("tapejit: compiled value_and_grad(tanh_loss) — "), said


def test_log_off_silences_even_a_slow_compile(monkeypatch, capfd, caplog):
    monkeypatch.setattr(first_call, "ANNOUNCE_SECONDS", 0.0)
    _compile_once(lambda w, x: np.sum(np.sin(x @ w)), monkeypatch, "off")
    assert capfd.readouterr().err == "" and caplog.records == []


def test_bad_log_setting_is_an_error(monkeypatch):
    monkeypatch.setenv("TAPEJIT_LOG", "loud")
    with pytest.raises(ValueError, match="TAPEJIT_LOG='loud': expected one of warning, info"):
        config.reload()


def test_a_float16_program_runs_on_the_interpreter_and_says_why(monkeypatch):
    """numba does not compile float16: the warning says so and how to compile (it asked the
    user to report a bug)."""
    monkeypatch.setenv("TAPEJIT_FIRST_CALL", "compile")
    config.reload()
    w = np.ones((3, 3), np.float16)
    g = tj.value_and_grad(lambda w, x: np.sum(np.tanh(x @ w) ** 2))
    with pytest.warns(tj.TapejitWarning, match=r"numba does not compile float16: compute in "
                                               r"float32 \(x.astype\(np.float32\)\)"):
        value, grad = g(w, np.ones((2, 3)))
    assert grad.dtype == np.float16 and g.cache_info()["codegen"]["numba"] == 0
