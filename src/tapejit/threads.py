"""One thread budget per process: how compiled programs share the cores.

A compiled program does its parallel work on one pool of threads: its large loop nests run
their outer loop on it (codegen/cpu.py), and its large matrix products are cut into blocks, one
single-threaded BLAS call per thread (codegen/blas.py `parts`). The pool of the llvm
generator's programs (the default) is its runtime's own (codegen/llvm/runtime.py: POSIX
threads, no numba import); numba's programs use numba's. BLAS's own thread
pool would otherwise wake for each product and then spin on the cores the next loop needs
(OpenBLAS's workers busy-wait after a call): on 2 cores an MLP gradient took 36 ms that way,
10.4 ms with BLAS held to one thread.

The budget of a call (`decide`, from `inputs`):
- `tj.set_num_threads(n)` or `TAPEJIT_NUM_THREADS=n`, where given: tapejit's own setting;
- else the fewest of: the cores other processes leave free (below), numba's thread count for
  the calling thread (`NUMBA_NUM_THREADS`, `numba.set_num_threads`), the CPUs the process may
  run on (its affinity mask),
  `OMP_NUM_THREADS`, and the limit of the BLAS libraries (`OPENBLAS_NUM_THREADS`,
  `MKL_NUM_THREADS`, a surrounding `threadpoolctl.threadpool_limits`): a process told to use
  fewer threads, by any of the usual means, gets no more from tapejit;
- never more than the pool (`pool`: `NUMBA_NUM_THREADS`, else the CPUs).

While a call of a program with parallel loops or a product BLAS could thread (`windowed`)
runs, the BLAS library its products call is held to one thread, and the budget is written
into the program's size table, from which its loop nests (`min(budget, n)` chunks) and its
products (`parts(m, n, k, budget)` threads) read it; for numba's programs numba's threads for
the calling thread are the budget too. All of it is put back when the call returns. Other
programs run as they are: a window costs about 4 us. The llvm generator's products call
numpy's own OpenBLAS (`numpy_blas`), held through its own functions (`_NumpyBlas`: no
threadpoolctl search, 4-5 ms); numba's programs call scipy's (`scipy_blas` loads it without
scipy.linalg's package), and their windows hold every BLAS library threadpoolctl finds. A
process that has not imported numba runs a numba program's windows on one thread, its BLAS
libraries left as they are, then imports numba on a thread of its own (0.1-0.3 s); the windows
after that import use the budget. The llvm generator's programs need no numba: a warm
process's first call uses the whole budget (the GMM gradient's first compiled result came
43 ms after `import tapejit`, against 56 ms on one thread with numba imported beside it).

On a busy machine the budget shrinks to the cores other processes leave free (`others`): a
parallel loop nest ends at a barrier where every thread waits for the slowest, and a thread
the OS has descheduled for another process's time slice holds them all (numba's OpenMP
threads spin while they wait). On 2 cores beside one CPU-bound process an MLP gradient took
24 ms median and 93 ms at the 90th percentile on 2 threads, 21 ms on one idle core. A
thread of this process takes a core the same way: OpenBLAS's workers spin for about 0.1 s
after a threaded numpy product, and a 2-thread gradient called in that time took as long as
on one thread, or longer. `others` reads the tasks running or ready to run (/proc/loadavg)
less the calling thread and tapejit's own (named "tapejit-..."; /proc/self/task), at most
once per READ_EVERY_S, and takes the fewer of the last two readings; no /proc (macOS,
Windows): no reading, the rule is off. A numba program's pool has threads tapejit cannot
tell from the others: for it this process's threads are not counted. A call of the llvm
generator's kept to one thread by this process's threads alone leaves BLAS its threads
(`_lends_blas`): OpenBLAS's spinning workers then do its products. An explicit setting
(`tj.set_num_threads`, TAPEJIT_NUM_THREADS) is used as given. numba's threading layer and
OpenMP's wait policy are left to numba and libgomp (measured against passive waiting, TBB,
workqueue and the runtime's own pool in docs/performance.md "On a busy machine").
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import os
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Sequence

import numpy as np

from .config import config
from .extensions import load_alone

# OpenBLAS runs a gemm of fewer multiply-adds on the calling thread (its
# GEMM_MULTITHREAD_THRESHOLD x SMP_THRESHOLD_MIN): a program whose products are all smaller,
# and which has no parallel loops, needs no window
BLAS_THREADED = 4 * 65536

READ_EVERY_S = 0.05     # a reading of the running tasks serves the calls of the next 50 ms
# the names of tapejit's own threads, which the busy rule does not count: the runtime pool's
# (codegen/llvm/pool_ir.py) and the full tier's compile thread, which runs on idle CPUs only
# (codegen/llvm/program.py)
POOL_NAME, TIER_NAME = "tapejit-pool", "tapejit-tier"
_OURS = (POOL_NAME.encode(), TIER_NAME.encode())

_explicit: int | None = None
# (time.monotonic() when read, that reading, others): each (other processes' tasks, this
# process's threads but tapejit's)
_reading: tuple[float, tuple[int, int], tuple[int, int]] = (float("-inf"), (0, 0), (0, 0))
_lock = threading.Lock()
_open = 0                                # windows open in this process (all threads)
_held: dict[Any, int | None] = {}        # BLAS library -> its limit before the first window
_libraries: tuple[bool, list[Any]] | None = None   # (scipy's BLAS loaded, the controllers)
_importer: threading.Thread | None = None      # imports numba beside a process's first window


def set_num_threads(n: int | None) -> None:
    """Use `n` threads for tapejit's compiled programs (None: back to the default, see
    `get_num_threads`); overrides TAPEJIT_NUM_THREADS."""
    global _explicit
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"tj.set_num_threads({n!r}): expected a whole number >= 1, or None "
                         f"for the default")
    _explicit = n


def get_num_threads() -> int:
    """The threads a compiled program called now would use (the module docstring's budget)."""
    return decide(**inputs())


def inputs(blas: int | None | str = "read", numba_pool: bool = False) -> dict[str, int | None]:
    """What the budget is decided from, now (`blas`: the BLAS libraries' limit, read from
    them unless given; `numba_pool`: for a numba program, see `others`)."""
    numba = numba_ready()
    if blas == "read":
        blas = _blas_limit(list(_held.values()) if _open else
                           [lib.get_num_threads() for lib in _blas()])
    cpus = _cpus()
    most = pool()
    return dict(explicit=_explicit or config().num_threads, pool=most,
                numba_threads=numba.get_num_threads() if numba else most, cpus=cpus,
                omp=config().omp_threads, blas=blas,  # type: ignore[dict-item]
                cores=os.cpu_count() or 1, others=others(numba_pool))


def decide(explicit: int | None, pool: int, numba_threads: int, cpus: int,
           omp: int | None, blas: int | None, cores: int = 1, others: int = 0) -> int:
    """The budget from its inputs (the module docstring's rule): `cores` the machine's CPUs,
    `others` the tasks of other processes running or ready to run on them."""
    if explicit:
        return max(1, min(explicit, pool))
    limits = [numba_threads, cpus] + [n for n in (omp, blas) if n]
    if others:
        limits.append(cores - others)
    return max(1, min(limits + [pool]))


def others(numba_pool: bool = False) -> int:
    """How many tasks besides tapejit's are running or waiting for a CPU: other processes',
    and this process's other threads (OpenBLAS's workers spin for about 0.1 s after a threaded
    numpy product); for a numba program (`numba_pool`), whose pool's threads cannot be told
    from the others, other processes' only. A reading at most every READ_EVERY_S, the fewer of
    it and the one before if that is recent (a task seen once, or a thread of ours caught
    between the two files, is a blip); 0 where /proc cannot be read."""
    global _reading
    now = time.monotonic()
    if now - _reading[0] >= READ_EVERY_S:
        running = _running()
        seen = _elsewhere(running) if running > 1 else (0, 0)
        recent = now - _reading[0] < 4 * READ_EVERY_S
        _reading = (now, seen, tuple(map(min, seen, _reading[1])) if recent else seen)
    processes, threads = _reading[2]
    return processes if numba_pool else processes + threads


def _running() -> int:
    """The tasks running or ready to run on the machine, this thread included (/proc/loadavg's
    4th field, "running/total"); 1 where it cannot be read."""
    try:
        with open("/proc/loadavg", "rb") as fh:
            return int(fh.read().split()[3].split(b"/")[0])
    except (OSError, ValueError, IndexError):
        return 1


def _elsewhere(running: int) -> tuple[int, int]:
    """Of `running` tasks (the machine's, this thread included): those of other processes,
    and this process's threads running besides this one and the runtime pool's."""
    every, ours = _own_running()
    return max(0, running - every), every - ours


def _own_running() -> tuple[int, int]:
    """This process's threads running or ready to run: all of them, and those of them that are
    this thread or tapejit's own (named in `_OURS`). Read only when something else runs:
    6-20 us a thread."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 1, 1                     # this thread
    me, every, ours = str(threading.get_native_id()), 0, 0
    for task in tasks:
        try:
            with open(f"/proc/self/task/{task}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:                 # the thread has ended
            continue
        end = stat.rindex(b")")
        if stat[end + 2:end + 3] == b"R":
            every += 1
            ours += task == me or stat[stat.index(b"(") + 1:end] in _OURS
    return every, ours


def name_thread(name: str) -> None:
    """Give the calling thread `name` where the OS keeps one per thread (Linux's
    prctl(PR_SET_NAME), at most 15 bytes): one of `_OURS` makes the busy rule pass it over."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).prctl(15, name.encode()[:15])
        except (OSError, AttributeError):
            pass


def windowed(parallel: bool, largest_product: int) -> bool:
    """Whether a program's calls run in a window: it has parallel loops, or a product BLAS
    would run on its threads."""
    return parallel or largest_product >= BLAS_THREADED


def run(fn: Callable[..., Sequence[Any]], args: Sequence[Any], sizes: Any, slot: int,
        numba_pool: bool = True) -> Sequence[Any]:
    """`fn(*args)` in a window: the budget in `sizes[slot]` for the program's parallel loops
    and products, the BLAS library its products call held to one thread, and (`numba_pool`:
    a numba program, whose loops run on numba's pool) numba's threads the budget."""
    global _open
    numba = numba_ready() if numba_pool else None
    if numba_pool and numba is None:
        return _first_window(fn, args, sizes, slot)
    libraries = _blas() if numba_pool else _program_blas()
    with _lock:
        for lib in libraries:
            if lib not in _held:
                n = _held[lib] = lib.get_num_threads()
                if n is not None and n > 1:
                    lib.set_num_threads(1)
        _open += 1
    try:
        given = inputs(_blas_limit([_held[lib] for lib in libraries]), numba_pool)
        n = decide(**given)
        sizes[slot] = n
        if numba is None:
            return _lending_blas(fn, args, libraries) if n == 1 and _lends_blas(given) \
                else fn(*args)
        before = given["numba_threads"]
        if n != before:
            numba.set_num_threads(n)
        try:
            return fn(*args)
        finally:
            if n != before:
                numba.set_num_threads(before)
    finally:
        with _lock:
            _open -= 1
            if _open == 0:
                for lib, n in _held.items():
                    if n is not None and n > 1:
                        lib.set_num_threads(n)
                _held.clear()


def _lends_blas(given: dict[str, int | None]) -> bool:
    """Whether a call of the llvm generator's on one thread lets BLAS thread its products: it
    runs on one only because this process's other threads run, and no tapejit setting says
    one. Those threads are most likely OpenBLAS's own workers, spinning after a threaded
    numpy product: a product wakes them at no cost."""
    return not given["explicit"] and decide(**{**given, "others": others(numba_pool=True)}) > 1


def _lending_blas(fn: Callable[..., Sequence[Any]], args: Sequence[Any],
                  libraries: list[Any]) -> Sequence[Any]:
    """`fn(*args)` with the BLAS libraries at the thread counts the window held back (where
    this is the only window open), held to one thread again after it if another opened (that
    window's products may run on BLAS's threads until then: as fast, only not held)."""
    with _lock:
        lent = [lib for lib in libraries if (_held.get(lib) or 0) > 1] if _open == 1 else []
        for lib in lent:
            lib.set_num_threads(_held[lib])
    try:
        return fn(*args)
    finally:
        with _lock:
            if _open > 1:
                for lib in lent:
                    lib.set_num_threads(1)


def _first_window(fn: Callable[..., Sequence[Any]], args: Sequence[Any], sizes: Any,
                  slot: int) -> Sequence[Any]:
    """A numba program's window before numba is imported: one thread, no pool to start, and
    the BLAS libraries left as they are (finding them costs 4-5 ms, which the windows after
    the import pay once); then numba is imported on a thread of its own where the budget is
    more than one (after the call: the import holds the GIL for a while)."""
    sizes[slot] = 1
    try:
        return fn(*args)
    finally:
        if decide(**inputs(blas=None, numba_pool=True)) > 1:
            _import_numba()


def numba_ready() -> ModuleType | None:
    """numba's package where some thread has imported it (not while it is being imported)."""
    numba = sys.modules.get("numba")
    spec = getattr(numba, "__spec__", None)
    return None if numba is None or getattr(spec, "_initializing", False) else numba


def pool() -> int:
    """The most threads a compiled program may use (numba's pool: NUMBA_NUM_THREADS, else the
    CPUs this process may run on); the llvm generator's runtime sizes its own pool so."""
    numba = numba_ready()
    if numba is not None:
        return int(numba.config.NUMBA_NUM_THREADS)
    try:
        return max(1, int(os.environ["NUMBA_NUM_THREADS"]))
    except (KeyError, ValueError):
        return _cpus()


def _cpus() -> int:
    """The CPUs this process may run on."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cpus or 1


def _import_numba() -> None:
    """Import numba (0.1-0.3 s) on a thread of its own, once: a process's first call of a
    numba program with parallel work ran on one thread rather than wait for it; the calls
    after the import use numba's pool and the budget."""
    global _importer
    with _lock:
        if _importer is None:
            _importer = threading.Thread(target=importlib.import_module, args=("numba",),
                                         name="tapejit-import-numba", daemon=True)
            _importer.start()


@functools.cache
def numpy_blas() -> ctypes.CDLL | None:
    """numpy's own OpenBLAS (scipy-openblas, 64-bit integers: `scipy_dgemm_64_`), which
    `import numpy` loaded, for the llvm generator's products: no scipy to import at a
    program's first product (10-25 ms). None where numpy was built with another BLAS."""
    libs = Path(np.__file__).parent.parent / "numpy.libs"
    found = sorted(libs.glob("libscipy_openblas64_*.so*")) if libs.is_dir() else []
    try:
        blas = ctypes.CDLL(str(found[0])) if len(found) == 1 else None
    except OSError:
        return None
    return blas if blas is not None and hasattr(blas, "scipy_dgemm_64_") else None


def scipy_blas() -> ModuleType:
    """scipy's `scipy.linalg.cython_blas` (its BLAS, the one numba calls), loaded without
    running scipy.linalg's package (28-80 ms) where that is not imported yet."""
    return load_alone("scipy.linalg.cython_blas")


def _blas_limit(limits: Sequence[int | None]) -> int | None:
    given = [n for n in limits if n]
    return min(given) if given else None


class _NumpyBlas:
    """numpy's OpenBLAS's thread count, set and read through its own functions (threadpoolctl
    takes 4-5 ms to find the libraries; this costs nothing)."""

    def __init__(self, blas: ctypes.CDLL) -> None:
        self._get = blas.scipy_openblas_get_num_threads64_
        self._set = blas.scipy_openblas_set_num_threads64_
        self._get.restype, self._set.argtypes = ctypes.c_int, [ctypes.c_int]

    def get_num_threads(self) -> int:
        return int(self._get())

    def set_num_threads(self, n: int) -> None:
        self._set(n)


def _program_blas() -> list[Any]:
    """The BLAS library the llvm generator's products call: numpy's own (where it has the
    functions to set its threads), else threadpoolctl's controllers of those loaded."""
    own = _numpy_blas_threads()
    return [own] if own is not None else _blas()


@functools.cache
def _numpy_blas_threads() -> _NumpyBlas | None:
    blas = numpy_blas()
    if blas is None or not hasattr(blas, "scipy_openblas_set_num_threads64_"):
        return None
    return _NumpyBlas(blas)


def _blas() -> list[Any]:
    """threadpoolctl's controllers of the BLAS libraries loaded: numpy's (the llvm generator's
    products call it), and scipy's once loaded (numba's programs call it: found again then)."""
    global _libraries
    scipy = "scipy.linalg.cython_blas" in sys.modules
    if _libraries is None or _libraries[0] != scipy:
        from threadpoolctl import ThreadpoolController
        _libraries = (scipy, ThreadpoolController().select(user_api="blas").lib_controllers)
    return _libraries[1]
