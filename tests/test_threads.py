"""The thread budget (threads.py) and products cut over threads (codegen/blas.py `parts`):
the decision on simulated machines of 1, 2, 8 and 64 cores, the window a program's call runs
in (numba's threads, BLAS held to one thread, both put back), and products split into blocks
computing what numpy computes."""
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import tapejit as tj
from tapejit import threads
from tapejit.config import config
from tapejit.codegen import blas
from tapejit.compile import Compiled
from hang import HANG_S


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


@pytest.mark.parametrize("cores", [1, 2, 8, 64])
def test_the_budget_is_the_fewest_of_what_the_process_was_told(cores):
    machine = dict(pool=cores, numba_threads=cores, cpus=cores, omp=None, blas=cores)
    assert threads.decide(explicit=None, **machine) == cores
    assert threads.decide(explicit=None, **{**machine, "cpus": 1}) == 1     # pinned to a CPU
    assert threads.decide(explicit=None, **{**machine, "omp": 4}) == min(4, cores)
    assert threads.decide(explicit=None, **{**machine, "blas": 1}) == 1   # threadpool_limits
    assert threads.decide(explicit=None, **{**machine, "blas": None}) == cores  # no BLAS seen
    assert threads.decide(explicit=None, **{**machine, "numba_threads": 1}) == 1
    # tapejit's own setting wins over the others, within numba's pool
    assert threads.decide(explicit=3, **{**machine, "blas": 1, "cpus": 1}) == min(3, cores)
    assert threads.decide(explicit=1000, **machine) == cores


@pytest.mark.parametrize("cores", [1, 2, 8, 64])
def test_products_take_a_thread_per_grain_of_work(cores):
    grain = blas.GRAIN
    assert blas.parts(4, 4, 4, cores) == 1                        # tiny: never split
    assert blas.parts(1797, 10, 256, cores) == min(cores, 2)      # 4.6M multiply-adds
    assert blas.parts(1797, 256, 256, cores) == min(cores, 56)    # 118M: 56 rows each at 64
    assert blas.parts(1, 10**6, 64, cores) == min(cores, 30)      # by columns
    for m, n, k in [(1797, 256, 256), (256, 256, 1797), (64, 4096, 100), (5000, 5000, 1)]:
        count = blas.parts(m, n, k, cores)
        assert 1 <= count <= cores
        assert count == 1 or (m * n * k // count >= grain and max(m, n) // count >= blas.SIDE)


PRODUCTS = [(300, 260, 270), (260, 300, 270), (1000, 1, 30), (1, 1000, 30), (97, 89, 83),
            (3, 2, 5), (64, 64, 1), (1, 1, 1)]


@pytest.mark.parametrize("m,n,k", PRODUCTS)
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_a_product_cut_into_blocks_is_numpys(m, n, k, ta, tb):
    rng = np.random.default_rng(m * 7 + n)
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
        b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
        want = (a.T if ta else a) @ (b.T if tb else b)
        for count in sorted({1, 2, 3, 8} & set(range(1, max(m, n) + 1))):
            out = np.full((m, n), np.nan, dtype)
            blas.blocks(a, b, out, ta, tb, count)
            np.testing.assert_allclose(out, want, rtol=tol, atol=tol * k)
        out = np.full((m, n), np.nan, dtype)
        blas.matmul(a, b, out, ta, tb, 8)
        np.testing.assert_allclose(out, want, rtol=tol, atol=tol * k)


@pytest.mark.parametrize("m,n,k", [(0, 4, 3), (4, 0, 3), (4, 3, 0)])
def test_an_empty_product_is_zeros(m, n, k):
    out = np.full((m, n), np.nan)
    blas.matmul(np.ones((m, k)), np.ones((k, n)), out, False, False, 4)
    assert np.array_equal(out, np.zeros((m, n)))


def test_large_products_split_as_parts_says():
    """Products big enough to split (several GRAINs) give numpy's result for every budget."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((700, 400)), rng.standard_normal((700, 300))
    want = a.T @ b
    for count in (1, 2, 5, 64):
        out = np.empty((400, 300))
        blas.matmul(a, b, out, True, False, count)
        assert blas.parts(400, 300, 700, count) == min(count, 12)   # 400 rows / SIDE
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-10)


def _mlp(w1, w2, x):
    return np.sum(np.tanh(np.tanh(x @ w1) @ w2) ** 2)


def _mlp_args(batch=256, width=256):     # batch == width: square products
    rng = np.random.default_rng(0)
    return (rng.standard_normal((width, width)) / 16, rng.standard_normal((width, width)) / 16,
            rng.standard_normal((batch, width)))


def test_calls_run_in_a_window_and_put_everything_back(monkeypatch):
    """Inside a windowed call: numba's threads are the budget, BLAS runs on one thread, the
    program's products read the budget; afterwards all is as before, after an error too."""
    monkeypatch.setattr(threads, "others", lambda numba_pool=False: 0)      # a quiet machine
    g = tj.grad(_mlp, argnums=(0, 1), backend="numba")
    args = _mlp_args()
    g(*args)
    program = next(iter(g.__wrapped_transform__._cache.values())).run
    assert isinstance(program, Compiled) and program.threads_slot is not None
    assert "tj_blas.matmul(" in program.source and f"S[{program.threads_slot}])" in program.source
    seen = []

    def probe(*args):
        seen.append((numba.get_num_threads(), _blas_threads(), int(args[-2][args[-1]])))
        raise KeyError("inside")

    before = (numba.get_num_threads(), _blas_threads())
    table = program.sizes.copy()
    with pytest.raises(KeyError):
        threads.run(lambda *a: probe(*a, table, program.threads_slot), (), table,
                    program.threads_slot)
    budget = tj.get_num_threads()
    assert seen == [(budget, [1] * len(before[1]), budget)]
    assert (numba.get_num_threads(), _blas_threads()) == before
    with threadpool_limits(limits=1, user_api="blas"):     # the user's limit holds
        assert tj.get_num_threads() == 1
    tj.set_num_threads(1)
    try:
        assert tj.get_num_threads() == 1
        one = g(*args)
        assert program.sizes[program.threads_slot] == 1
    finally:
        tj.set_num_threads(None)
    every = g(*args)
    assert program.sizes[program.threads_slot] == tj.get_num_threads()
    for x, y in zip(one, every):
        np.testing.assert_allclose(x, y, rtol=1e-10)
    assert (numba.get_num_threads(), _blas_threads()) == before


@pytest.fixture
def no_omp_limit(monkeypatch):
    """OMP_NUM_THREADS unset, as tapejit's settings read it (Dask's nanny sets it to 1 in this
    process's environment; a limit of 1 is a user's setting that holds BLAS to one thread)."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    tj.config.reload()
    yield
    monkeypatch.undo()
    tj.config.reload()


@pytest.mark.usefixtures("no_omp_limit")
def test_a_call_on_one_thread_for_this_process_s_threads_lets_blas_thread(monkeypatch):
    """A call of the llvm generator's that runs on one thread only because this process's
    other threads run (OpenBLAS's workers, spinning after a numpy product) leaves BLAS its
    threads for its products; one that other processes keep to one thread holds BLAS to one,
    as does the user's setting. Afterwards all is as before."""
    lib = threads._program_blas()[0]
    before, users, cores = lib.get_num_threads(), 2, 2      # a 2-core machine, BLAS threaded
    for name in ("_cpus", "pool"):
        monkeypatch.setattr(threads, name, lambda: cores)
    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    monkeypatch.setattr(threads, "numba_ready", lambda: None)   # numba's threads: the pool
    lib.set_num_threads(users)
    seen = []

    def window(processes, own):
        monkeypatch.setattr(threads, "others",
                            lambda numba_pool=False: processes + (0 if numba_pool else own))
        sizes = np.zeros(1, np.int64)
        threads.run(lambda: seen.append((int(sizes[0]), lib.get_num_threads())) or (), (),
                    sizes, 0, numba_pool=False)
        return seen.pop()
    assert window(0, cores) == (1, users)           # only this process's threads: lent
    assert window(cores, 0) == (1, 1)               # other processes: held to one
    assert window(0, 0) == (cores, 1)               # our pool's blocks: held to one
    tj.set_num_threads(1)
    try:
        assert window(0, cores) == (1, 1)           # the user's setting: held to one
    finally:
        tj.set_num_threads(None)
        assert lib.get_num_threads() == users
        lib.set_num_threads(before)


@pytest.mark.usefixtures("no_omp_limit")
def test_a_compiled_gradient_with_blas_lent_matches_the_interpreter(monkeypatch):
    """The compiled MLP gradient (square products, batch == width), first and second call,
    run with BLAS lent (this process's threads alone keep it to one thread): the products in
    one block each, threaded by BLAS, give the interpreter's result."""
    lib = threads._program_blas()[0]
    before = lib.get_num_threads()
    for name in ("_cpus", "pool"):
        monkeypatch.setattr(threads, name, lambda: 2)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "others", lambda numba_pool=False: 0 if numba_pool else 2)
    lent, lending = [], threads._lending_blas
    monkeypatch.setattr(threads, "_lending_blas",
                        lambda fn, args, libs: lent.append(1) or lending(fn, args, libs))
    lib.set_num_threads(2)
    try:
        g = tj.grad(_mlp, argnums=(0, 1))
        args = _mlp_args()
        outs = [g(*args), g(*args)]
    finally:
        lib.set_num_threads(before)
    info = g.cache_info()                       # compiled code (or its copy on disk) ran
    assert info["compiles"] + info["disk_loads"] == 1 and info["interpreted"] == 0
    assert len(lent) == 2
    want = tj.grad(_mlp, argnums=(0, 1), backend="interpret")(*args)
    for got in outs:
        for x, y in zip(got, want):
            np.testing.assert_allclose(x, y, rtol=1e-10, atol=1e-12)


def test_small_programs_need_no_window():
    g = tj.grad(_mlp, argnums=(0, 1), backend="numba")
    g(*_mlp_args(batch=16, width=64))      # products of 65,536 multiply-adds
    program = next(iter(g.__wrapped_transform__._cache.values())).run
    assert "tj_blas.matmul(" in program.source and program.threads_slot is None


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "4"])
def test_set_num_threads_refuses_what_is_not_a_count(bad):
    with pytest.raises(ValueError, match=r"tj.set_num_threads\(.*whole number >= 1"):
        tj.set_num_threads(bad)


@pytest.mark.parametrize("cores", [1, 2, 8, 64])
def test_a_busy_machine_leaves_the_free_cores(cores):
    machine = dict(explicit=None, pool=cores, numba_threads=cores, cpus=cores, omp=None,
                   blas=None, cores=cores)
    assert threads.decide(**machine, others=0) == cores
    assert threads.decide(**machine, others=1) == max(1, cores - 1)
    assert threads.decide(**machine, others=cores) == 1           # every core taken
    assert threads.decide(**machine, others=10 * cores) == 1
    # a process allowed 2 of 64 CPUs, beside 62 busy ones: its 2 are free
    assert threads.decide(**{**machine, "cpus": min(2, cores), "cores": 64}, others=62) \
        == min(2, cores)
    # tapejit's own setting is used as given
    assert threads.decide(**{**machine, "explicit": 2}, others=10 * cores) == min(2, cores)


def test_the_running_tasks_are_read_at_most_once_per_interval(monkeypatch):
    reads, running, own = [], [4], [(2, 1)]   # 4 running: 2 of them ours, 1 tapejit's
    monkeypatch.setattr(threads, "_running", lambda: reads.append("loadavg") or running[0])
    monkeypatch.setattr(threads, "_own_running", lambda: reads.append("own") or own[0])
    none = (0, 0)
    monkeypatch.setattr(threads, "_reading", (float("-inf"), none, none))    # no reading yet
    assert threads.others() == 3 and reads == ["loadavg", "own"]
    assert threads.others(numba_pool=True) == 2     # this process's other thread not counted
    monkeypatch.setattr(threads, "_reading", (time.monotonic() - 0.1, none, none))  # quiet

    def later():            # READ_EVERY_S after the last reading
        monkeypatch.setattr(threads, "_reading",
                            (time.monotonic() - threads.READ_EVERY_S, *threads._reading[1:]))
    reads.clear()
    assert threads.others() == 0 and reads == ["loadavg", "own"]   # 3 seen once: a blip
    assert threads.others() == 0 and len(reads) == 2               # cached
    later()
    assert threads.others() == 3 and len(reads) == 4               # seen twice: load
    later()
    running[0] = 1
    assert threads.others() == 0 and reads[4:] == ["loadavg"]     # only us: no scan
    later()
    running[0] = 2
    assert threads.others() == 0                                   # a blip again
    every, ours = threads._own_running()
    assert threads._running() >= 1 and every >= ours >= 1          # this thread runs


def test_a_busy_thread_of_this_process_is_load_and_the_pool_is_not():
    """OpenBLAS's workers spin for a while after a threaded numpy product: a thread of this
    process that keeps a core busy (here numpy loops, which release the GIL) counts as load.
    tapejit's own threads are told apart by their names: the runtime pool's, and the full
    tier's compile thread (which runs on idle CPUs only)."""
    f = tj.jit(lambda x: np.sum(np.sin(x) * x))
    tj.set_num_threads(2)
    try:
        f(np.random.default_rng(0).random(4 * config().parallel_min_size))
    finally:
        tj.set_num_threads(None)
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as fh:
                names.append(fh.read().strip())
        except FileNotFoundError:       # a thread that has ended
            pass
    assert (os.cpu_count() or 1) < 2 or threads.POOL_NAME in names
    time.sleep(0.25)            # an earlier test's OpenBLAS workers spin for about 0.1 s
    quiet = min(every - ours for every, ours in (threads._own_running() for _ in range(5)))
    big = np.ones(2_000_000)

    def readings(name):
        """_own_running while a thread (named `name`, if given) runs numpy loops."""
        stop = threading.Event()

        def busy():
            if name:
                threads.name_thread(name)
            while not stop.is_set():
                np.sin(big, out=big)
        worker = threading.Thread(target=busy, daemon=True)
        worker.start()
        try:
            seen = []
            for _ in range(50):
                seen.append(threads._own_running())
                time.sleep(0.001)
            return [every - ours for every, ours in seen]
        finally:
            stop.set()
            worker.join()
    assert max(readings(None)) >= quiet + 1
    assert min(readings(threads.TIER_NAME)) <= quiet     # the full tier's compile thread


def test_a_call_on_a_busy_machine_runs_on_one_thread(monkeypatch):
    g = tj.grad(_mlp, argnums=(0, 1), backend="numba")
    args = _mlp_args()
    monkeypatch.setattr(threads, "others", lambda numba_pool=False: 0)
    quiet = g(*args)
    program = next(iter(g.__wrapped_transform__._cache.values())).run
    monkeypatch.setattr(threads, "others", lambda numba_pool=False: os.cpu_count())  # all taken
    seen, window = [], threads.run

    def probed(fn, args, sizes, slot, numba_pool=True):
        return window(lambda *a: seen.append(int(sizes[slot])) or fn(*a), args, sizes, slot,
                      numba_pool)
    monkeypatch.setattr(threads, "run", probed)
    busy = g(*args)
    assert seen == [1] and program.sizes[program.threads_slot] == 1
    for x, y in zip(busy, quiet):
        np.testing.assert_allclose(x, y, rtol=1e-10)
    tj.set_num_threads(2)                 # the user's setting wins over the reading
    try:
        assert tj.get_num_threads() == min(2, numba.config.NUMBA_NUM_THREADS)
    finally:
        tj.set_num_threads(None)


LAYER_PROBE = textwrap.dedent("""
    import os, numba, numpy as np, tapejit as tj
    f = tj.grad(lambda x: np.sum(np.sin(x) * 2.0), backend="numba")
    f(np.ones(1 << 18))
    assert "numba.prange" in next(iter(f.__wrapped_transform__._cache.values())).run.source
    print(numba.threading_layer(), os.environ.get("OMP_WAIT_POLICY"), tj.get_num_threads())
""")


@pytest.mark.parametrize("env,layers,policy", [
    ({}, ("omp", "tbb"), "None"),                              # numba's choice, no policy
    ({"NUMBA_THREADING_LAYER": "workqueue"}, ("workqueue",), "None"),
    ({"OMP_WAIT_POLICY": "passive"}, ("omp", "tbb"), "passive"),
])
def test_the_threading_layer_in_a_new_process_is_numbas_or_the_users(env, layers, policy):
    """tapejit sets neither the layer nor OpenMP's wait policy (docs/performance.md: measured,
    numba's default order and libgomp's default policy were fastest); the user's win."""
    clean = {k: v for k, v in os.environ.items()
             if k not in ("NUMBA_THREADING_LAYER", "OMP_WAIT_POLICY", "TAPEJIT_NUM_THREADS")}
    out = subprocess.run([sys.executable, "-c", LAYER_PROBE], capture_output=True, text=True,
                         env={**clean, "TAPEJIT_FIRST_CALL": "compile", "TAPEJIT_VERIFY": "0",
                              **env}, timeout=HANG_S)
    assert out.returncode == 0, out.stderr
    layer, seen_policy, budget = out.stdout.split()
    assert layer in layers and seen_policy == policy and int(budget) >= 1


FIRST_WINDOW = """
import json, sys
import numpy as np
import tapejit as tj
from tapejit import threads
budgets, run = [], threads.run

def spy(fn, args, sizes, slot, numba_pool=True):
    try:
        return run(fn, args, sizes, slot, numba_pool)
    finally:
        budgets.append(int(sizes[slot]))

threads.run = spy
f = tj.grad(lambda w, x: np.sum(np.tanh(x @ w) ** 2))
w, x = np.linspace(-1.0, 1.0, 64 * 32).reshape(64, 32), np.ones((4096, 64))
first = f(w, x)
second = f(w, x)
print(json.dumps([budgets, "numba" in sys.modules, "scipy.linalg" in sys.modules,
                  float(np.max(np.abs(second - first))), f.cache_info()["codegen"],
                  threads.pool()]))
"""


def test_a_warm_process_uses_the_budget_from_its_first_call_without_numba(tmp_path):
    """The llvm generator's programs run their parallel loops on the runtime's own pool: a
    warm process's first call of a program with parallel work uses the whole budget, and
    neither numba nor scipy.linalg is imported for it."""
    env = {**os.environ, "TAPEJIT_CODEGEN": "llvm", "TAPEJIT_NUM_THREADS": "2",
           "TAPEJIT_FIRST_CALL": "compile", "TAPEJIT_VERIFY": "1",
           "TAPEJIT_CACHE_DIR": str(tmp_path / "cache")}
    for _ in range(2):         # the first process may build kernels with numba: the second
        child = subprocess.run([sys.executable, "-c", FIRST_WINDOW], env=env, check=True,
                               capture_output=True, text=True, timeout=HANG_S)
    budgets, numba_imported, scipy_imported, difference, codegen, pool = \
        json.loads(child.stdout)
    budget = min(2, pool)     # (one CPU where a test before pinned this process: bench/)
    assert codegen == {"llvm": 1, "numba": 0}, child.stdout
    assert budgets == [budget, budget], child.stdout
    assert not numba_imported and not scipy_imported, child.stdout
    assert difference < 1e-9


NUMPY_BLAS = """
import sys
import numpy as np
import tapejit as tj
a = np.random.default_rng(0).normal(size=(80, 70))       # a product BLAS computes
print(np.allclose(tj.jit(lambda a: a @ a.T)(a), a @ a.T, rtol=1e-13), "scipy" in sys.modules)
"""


def test_compiled_products_call_numpy_s_blas_without_scipy():
    """Where numpy ships its OpenBLAS (threads.numpy_blas), the llvm generator's products call
    it: no scipy imported for a product."""
    from tapejit import threads
    if threads.numpy_blas() is None:
        pytest.skip("this numpy was built with another BLAS")
    out = subprocess.run([sys.executable, "-c", NUMPY_BLAS], capture_output=True, text=True,
                         timeout=HANG_S, env={**os.environ, "TAPEJIT_FIRST_CALL": "compile"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "False"]
