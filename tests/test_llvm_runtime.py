"""The LLVM programs' call path (codegen/llvm/runtime.py): the trampoline `bind` makes writes
the right data pointers and refuses anything but `count` ndarrays without crashing; and
`tj_rt_parallel_for` visits every index once, in the chunks it promises, on the runtime's own
pool, concurrently, on no more threads than its chunks, beside numba's own parallel functions,
from two Python threads at once, from inside a chunk and in a forked child; and the allocator
hands a freed large block to the next allocation of its size, within its limit. Test programs
are small IR modules compiled here with llvmlite, calling the runtime as generated programs
do (by symbol)."""
from __future__ import annotations

import ctypes
import gc
import subprocess
import sys
import threading
import weakref

import llvmlite.binding as llvm
import numba
import numpy as np
import pytest

from tapejit.codegen.llvm import runtime
from tapejit.codegen.llvm.alloc_ir import HEADER, LARGE
from tapejit.codegen.llvm.pool_ir import ITEMS
from hang import HANG_S

_engines = []      # the test modules' code lives as long as the test process


def _jit(ir: str) -> llvm.ExecutionEngine:
    runtime.ensure()                                      # initialises LLVM's native target
    module = llvm.parse_assembly(ir)
    module.verify()
    machine = llvm.Target.from_default_triple().create_target_machine(jit=True)
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    _engines.append(engine)
    return engine


# tj_entry(table, S): S[k] = table[k] for k < 3, the pointers it was given
COPY = _jit("""
define void @tj_entry(ptr %table, ptr %S) {
  %a = load i64, ptr %table
  store i64 %a, ptr %S
  %t1 = getelementptr i64, ptr %table, i64 1
  %b = load i64, ptr %t1
  %s1 = getelementptr i64, ptr %S, i64 1
  store i64 %b, ptr %s1
  %t2 = getelementptr i64, ptr %table, i64 2
  %c = load i64, ptr %t2
  %s2 = getelementptr i64, ptr %S, i64 2
  store i64 %c, ptr %s2
  ret void
}""").get_function_address("tj_entry")


def _bound(count: int = 2):
    table, sizes = np.zeros(3, np.int64), np.zeros(3, np.int64)
    workspace = np.empty(4)
    table[2] = workspace.ctypes.data          # a slot the caller fills once
    call = runtime.bind(COPY, table, sizes, count, name="copy", keep=workspace)
    return call, sizes, workspace


def test_bind_writes_each_arrays_data_pointer_and_calls_the_entry():
    call, sizes, workspace = _bound()
    a, b = np.arange(5.0), np.zeros((2, 3), np.float32)
    assert call(a, b) is None
    assert list(sizes) == [a.ctypes.data, b.ctypes.data, workspace.ctypes.data]
    c = np.ones(7, np.int8)
    call(c, a)                                            # later calls write their own
    assert list(sizes[:2]) == [c.ctypes.data, a.ctypes.data]


@pytest.mark.parametrize("make", [
    lambda: np.arange(12.0).reshape(3, 4)[:, 1],          # not contiguous: its data pointer
    lambda: np.arange(12.0)[5:],                          # an offset into its base
    lambda: np.asfortranarray(np.ones((3, 2))),
    lambda: np.array(3.0),                                # 0-d
    lambda: np.empty(0),
    lambda: np.ones(3).view(np.recarray),                 # a subclass is an ndarray
    lambda: np.broadcast_to(np.ones(3), (4, 3)),          # read-only
], ids=["strided", "offset", "fortran", "0-d", "empty", "subclass", "readonly"])
def test_every_kind_of_ndarray_passes_its_data_pointer(make):
    call, sizes, _ = _bound(1)
    a = make()
    call(a)
    assert sizes[0] == a.ctypes.data
    assert sizes[0] == a.__array_interface__["data"][0]


@pytest.mark.parametrize("args,message", [
    ((), r"copy takes 2 arrays \(0 given\)"),
    ((np.ones(2),), r"copy takes 2 arrays \(1 given\)"),
    ((np.ones(2),) * 3, r"copy takes 2 arrays \(3 given\)"),
    ((np.ones(2), [1.0, 2.0]), r"copy: argument 2 of 2 has type <class 'list'>, expected a "
                               r"numpy.ndarray"),
    ((2.5, np.ones(2)), r"argument 1 of 2 has type <class 'float'>"),
    ((np.ones(2), None), r"argument 2 of 2 has type <class 'NoneType'>"),
    ((np.float64(1.0), np.ones(2)), r"argument 1 of 2 has type <class 'numpy.float64'>"),
    ((memoryview(b"ab"), np.ones(2)), r"argument 1 of 2 has type <class 'memoryview'>"),
])
def test_anything_but_count_arrays_is_a_type_error(args, message):
    call, sizes, _ = _bound()
    with pytest.raises(TypeError, match=message):
        call(*args)
    assert not sizes.any()                                # the entry never ran
    a, b = np.ones(1), np.ones(2)
    call(a, b)                                            # and the function still works
    assert sizes[1] == b.ctypes.data


def test_keywords_are_refused():
    call, _, _ = _bound()
    with pytest.raises(TypeError, match="keyword"):
        call(np.ones(1), b=np.ones(1))


def test_calls_leak_no_references():
    """A leak (or a missing incref of the None returned) would move a count by 1000."""
    call, _, _ = _bound()
    a, b = np.ones(3), np.ones(4)
    before = sys.getrefcount(None), sys.getrefcount(a), sys.getrefcount(b)
    for _ in range(1000):
        call(a, b)
        try:
            call(a, 1.0)
        except TypeError:
            pass
    after = sys.getrefcount(None), sys.getrefcount(a), sys.getrefcount(b)
    assert abs(after[0] - before[0]) < 100 and after[1:] == before[1:], (before, after)


def test_the_function_keeps_its_tables_alive_and_drops_them_with_it():
    table, sizes = np.zeros(3, np.int64), np.zeros(3, np.int64)
    watched = weakref.ref(table), weakref.ref(sizes)
    call = runtime.bind(COPY, table, sizes, 3)
    del table, sizes
    gc.collect()
    a = np.ones(2)
    call(a, a, a)
    assert watched[1]()[2] == a.ctypes.data     # the entry ran on the tables it was bound to
    del call
    gc.collect()
    assert all(w() is None for w in watched)


FRESH = [((4,), np.float64), ((), np.float32), ((2, 3), np.bool_), ((0, 5), np.int64)]


@pytest.mark.parametrize("shape,dtype", FRESH, ids=["f8", "0-d f4", "2-d bool", "empty i8"])
def test_fresh_arrays_are_new_each_call_and_their_pointers_go_after_the_arguments(shape, dtype):
    table, sizes = np.zeros(3, np.int64), np.zeros(3, np.int64)
    workspace = np.empty(2)
    table[2] = workspace.ctypes.data
    call = runtime.bind(COPY, table, sizes, 1, fresh=[(shape, dtype)])
    a = np.arange(3.0)
    first = call(a)
    assert isinstance(first, tuple) and len(first) == 1
    made = first[0]
    assert type(made) is np.ndarray and made.shape == shape and made.dtype == dtype
    assert made.flags.c_contiguous and made.flags.writeable and made.flags.owndata
    assert list(sizes) == [a.ctypes.data, made.ctypes.data, workspace.ctypes.data]
    again = call(a)[0]
    assert again is not made and (made.size == 0 or again.ctypes.data != made.ctypes.data)
    assert sizes[1] == again.ctypes.data


def test_fresh_arrays_leak_no_references_and_are_freed_with_their_tuple():
    call = runtime.bind(COPY, np.zeros(3, np.int64), np.zeros(3, np.int64), 1,
                        fresh=[((4,), np.float64), ((2,), np.float32)])
    a, f8 = np.ones(2), np.dtype(np.float64)
    before = sys.getrefcount(f8), sys.getrefcount(a)
    for _ in range(1000):
        made = call(a)
    counts = sys.getrefcount(made), sys.getrefcount(made[0])
    assert counts == (2, 2)                       # the name's and the tuple's alone
    watched = weakref.ref(made[0])
    del made
    assert watched() is None
    assert (sys.getrefcount(f8), sys.getrefcount(a)) == before     # each array's dtype freed


def test_a_fresh_array_numpy_cannot_make_raises_its_error_and_skips_the_entry():
    table, sizes = np.zeros(3, np.int64), np.zeros(3, np.int64)
    call = runtime.bind(COPY, table, sizes, 1,
                        fresh=[((2,), np.float32), ((2**62, 2**62), np.float64)])
    f4 = np.dtype(np.float32)     # the first array's (numpy itself leaks the failing one's)
    before = sys.getrefcount(f4)
    for _ in range(100):
        try:
            call(np.ones(1))
        except (ValueError, MemoryError):
            pass
        else:
            raise AssertionError("numpy made a 2**124-element array")
    after = sys.getrefcount(f4)
    assert after == before, "the first array, made before the error, leaked"
    assert not sizes.any()
    with pytest.raises(ValueError, match="less the 2 fresh arrays"):
        runtime.bind(COPY, table, sizes, 2, fresh=[((2,), np.float64)] * 2)


@pytest.mark.parametrize("table,count", [
    (np.zeros(3, np.int32), 1), (np.zeros((3, 1), np.int64), 1), (np.zeros(3, np.int64), 4),
    (np.zeros(3, np.int64), -1), (np.zeros(3, np.int64), "2"), (np.zeros(6, np.int64)[::2], 1)])
def test_bind_refuses_tables_it_cannot_write(table, count):
    with pytest.raises(ValueError, match="bind"):
        runtime.bind(COPY, table, np.zeros(2, np.int64), count)


@pytest.mark.parametrize("entry", [0, None, 1.0])
def test_bind_refuses_an_entry_that_is_no_address(entry):
    with pytest.raises(ValueError, match="bind: entry"):
        runtime.bind(entry, np.zeros(2, np.int64), np.zeros(2, np.int64), 1)


# ---- tj_rt_parallel_for ----------------------------------------------------------------------
# ctx words: 0 the visits per index (i64), 1 the chunk of each index, 2 the data (f64),
# 3 each chunk's sum, 4 the thread that ran each chunk (pthread_self)
PARALLEL = _jit("""
declare void @tj_rt_parallel_for(ptr, ptr, i64, i64)
declare i64 @pthread_self()

define void @visit(ptr %ctx, i64 %c, i64 %lo, i64 %hi) {
entry:
  %visits = load ptr, ptr %ctx
  %chunk.at = getelementptr ptr, ptr %ctx, i64 1
  %chunk = load ptr, ptr %chunk.at
  %data.at = getelementptr ptr, ptr %ctx, i64 2
  %data = load ptr, ptr %data.at
  %sums.at = getelementptr ptr, ptr %ctx, i64 3
  %sums = load ptr, ptr %sums.at
  %who.at = getelementptr ptr, ptr %ctx, i64 4
  %who = load ptr, ptr %who.at
  %self = call i64 @pthread_self()
  %who.c = getelementptr i64, ptr %who, i64 %c
  store i64 %self, ptr %who.c
  %empty = icmp sge i64 %lo, %hi
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [%lo, %entry], [%i.next, %loop]
  %sum = phi double [0.0, %entry], [%sum.next, %loop]
  %v.at = getelementptr i64, ptr %visits, i64 %i
  %old = atomicrmw add ptr %v.at, i64 1 seq_cst
  %c.at = getelementptr i64, ptr %chunk, i64 %i
  store i64 %c, ptr %c.at
  %x.at = getelementptr double, ptr %data, i64 %i
  %x = load double, ptr %x.at
  %sum.next = fadd double %sum, %x
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %hi
  br i1 %more, label %loop, label %store
store:
  %s.at = getelementptr double, ptr %sums, i64 %c
  store double %sum.next, ptr %s.at
  br label %done
done:
  ret void
}

define void @run(ptr %ctx, i64 %n, i64 %chunks) {
  call void @tj_rt_parallel_for(ptr @visit, ptr %ctx, i64 %n, i64 %chunks)
  ret void
}

; chunk c counts itself in, then waits (a bounded spin) until all `ctx[1]` chunks are in:
; ctx[2][c] = 1 if they all were running at once
define void @meet(ptr %ctx, i64 %c, i64 %lo, i64 %hi) {
entry:
  %want.at = getelementptr i64, ptr %ctx, i64 1
  %want = load i64, ptr %want.at
  %met.at = getelementptr ptr, ptr %ctx, i64 2
  %met = load ptr, ptr %met.at
  %in = atomicrmw add ptr %ctx, i64 1 seq_cst
  br label %spin
spin:
  %k = phi i64 [0, %entry], [%k.next, %wait]
  %now = load atomic i64, ptr %ctx seq_cst, align 8
  %all = icmp sge i64 %now, %want
  br i1 %all, label %done, label %wait
wait:
  %k.next = add i64 %k, 1
  %patience = icmp slt i64 %k.next, 4000000000
  br i1 %patience, label %spin, label %done
done:
  %flag = zext i1 %all to i64
  %m.at = getelementptr i64, ptr %met, i64 %c
  store i64 %flag, ptr %m.at
  ret void
}

define void @run_meet(ptr %ctx, i64 %chunks) {
  call void @tj_rt_parallel_for(ptr @meet, ptr %ctx, i64 %chunks, i64 %chunks)
  ret void
}

; chunk c runs its own parallel loop: `visit` over ctx[c] (a visit context), ctx[-1] its length
; in ctx[-2] chunks (a loop inside a chunk runs on the chunk's thread)
define void @nested(ptr %ctx, i64 %c, i64 %lo, i64 %hi) {
  %inner.at = getelementptr ptr, ptr %ctx, i64 %c
  %inner = load ptr, ptr %inner.at
  %n.at = getelementptr i64, ptr %ctx, i64 -1
  %n = load i64, ptr %n.at
  %chunks.at = getelementptr i64, ptr %ctx, i64 -2
  %chunks = load i64, ptr %chunks.at
  call void @tj_rt_parallel_for(ptr @visit, ptr %inner, i64 %n, i64 %chunks)
  ret void
}

define void @run_nested(ptr %ctx, i64 %chunks) {
  call void @tj_rt_parallel_for(ptr @nested, ptr %ctx, i64 %chunks, i64 %chunks)
  ret void
}
""")
# ctypes releases the GIL around these calls, as a program's own threads would run
RUN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
    PARALLEL.get_function_address("run"))
RUN_MEET = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
    PARALLEL.get_function_address("run_meet"))
RUN_NESTED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
    PARALLEL.get_function_address("run_nested"))


def _visit(n: int, chunks: int) -> dict[str, np.ndarray]:
    """Run `visit` over [0, n) in `chunks` chunks; what it recorded."""
    seen, ctx = _visit_context(n, chunks)
    RUN(ctx.ctypes.data, n, chunks)
    return seen


def _visit_context(n: int, chunks: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    seen = {"visits": np.zeros(n, np.int64), "chunk": np.full(n, -1, np.int64),
            "data": np.random.default_rng(n).normal(size=n),
            "sums": np.zeros(max(chunks, 1)), "who": np.zeros(max(chunks, 1), np.uint64)}
    return seen, np.array([a.ctypes.data for a in seen.values()], np.int64)


def _check_chunks(seen: dict[str, np.ndarray], n: int, chunks: int) -> None:
    assert (seen["visits"] == 1).all(), "an index visited other than once"
    c = max(chunks, 1)
    want = np.repeat(np.arange(c), [(k + 1) * n // c - k * n // c for k in range(c)])
    np.testing.assert_array_equal(seen["chunk"], want)
    for k in range(c):
        np.testing.assert_allclose(seen["sums"][k], seen["data"][want == k].sum())
    np.testing.assert_allclose(seen["sums"].sum(), seen["data"].sum())


@pytest.fixture(scope="module")
def pool():
    """The threads the runtime's pool may use (threads.pool() when it loaded)."""
    return ctypes.c_int64.from_address(runtime.ensure().code.address("tj_rt_pool_size")).value


@pytest.mark.parametrize("n", [0, 1, 7, 1000])
@pytest.mark.parametrize("chunks", [1, 2, 3, "n+5", 0])
def test_parallel_for_visits_each_index_once_in_its_chunk(pool, n, chunks):
    chunks = n + 5 if chunks == "n+5" else chunks
    _check_chunks(_visit(n, chunks), n, chunks)


def test_more_chunks_than_a_job_has_items(pool):
    """A job's chunks beyond pool_ir.ITEMS are run in runs, each chunk once, in order."""
    chunks = ITEMS + 904
    _check_chunks(_visit(3 * chunks + 5, chunks), 3 * chunks + 5, chunks)


def test_chunks_run_at_once_on_the_pool(pool):
    if pool < 2:
        pytest.skip("the pool has one thread here (NUMBA_NUM_THREADS=1 or one CPU)")
    chunks = min(pool, 4)
    ctx = np.zeros(3, np.int64)
    met = np.zeros(chunks, np.int64)
    ctx[1], ctx[2] = chunks, met.ctypes.data
    RUN_MEET(ctx.ctypes.data, chunks)
    assert ctx[0] == chunks and met.all(), f"chunks met the others: {met}"


def test_one_chunk_or_a_pool_of_one_runs_on_the_caller(pool):
    me = _pthread_self()
    seen = _visit(100, 1)
    assert set(seen["who"]) == {me}
    size = ctypes.c_int64.from_address(runtime.ensure().code.address("tj_rt_pool_size"))
    before, size.value = size.value, 1
    try:
        seen = _visit(100, 4)
    finally:
        size.value = before
    _check_chunks(seen, 100, 4)
    assert set(seen["who"]) == {me}


def test_a_parallel_loop_inside_a_chunk_runs_on_the_chunks_thread(pool):
    outer, inner = 3, 4
    contexts = [_visit_context(500, inner) for _ in range(outer)]
    ctx = np.array([inner, 500] + [c.ctypes.data for _, c in contexts], np.int64)
    RUN_NESTED(ctx[2:].ctypes.data, outer)
    for seen, _ in contexts:
        _check_chunks(seen, 500, inner)
        assert len(set(seen["who"])) == 1, "an inner loop's chunks ran on several threads"


def test_beside_numba_parallel_functions(pool):
    @numba.njit(parallel=True)
    def total(x):
        s = 0.0
        for i in numba.prange(x.shape[0]):
            s += x[i]
        return s

    x = np.arange(10_000.0)
    for _ in range(3):
        assert total(x) == x.sum()
        _check_chunks(_visit(1000, 2), 1000, 2)


def test_two_python_threads_at_once(pool):
    failures = []

    def work(chunks: int) -> None:
        try:
            for _ in range(200):
                _check_chunks(_visit(1000, chunks), 1000, chunks)
        except AssertionError as e:        # pragma: no cover - reported below
            failures.append(e)

    workers = [threading.Thread(target=work, args=(c,)) for c in (2, 3, 5)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failures, failures[0]


def _pthread_self() -> int:
    fn = ctypes.CDLL(None).pthread_self
    fn.restype = ctypes.c_uint64
    return fn()


PROBE = """
import ctypes, os, sys, threading, time
from tapejit import threads
from tapejit.codegen.llvm import runtime
found = runtime.ensure().symbols["tj_rt_parallel_for"]
assert "numba" not in sys.modules, "ensure() imported numba"
seen = []

def visit(ctx, c, lo, hi):
    seen.append((c, lo, hi, threading.get_ident()))
    time.sleep(0.005)          # (lets a pool thread take the next chunk)

chunk = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                         ctypes.c_int64)(visit)
parallel_for = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                ctypes.c_int64)(found)
me = threading.get_ident()

def run(n, chunks):
    seen.clear()
    parallel_for(ctypes.cast(chunk, ctypes.c_void_p), None, n, chunks)
    return sorted(seen)

def tasks():
    return len(os.listdir("/proc/self/task"))

before = tasks()
assert run(10, 1) == [(0, 0, 10, me)] and tasks() == before, "one chunk: no pool"
for _ in range(50):
    assert [s[:3] for s in run(10, 3)] == [(0, 0, 3), (1, 3, 6), (2, 6, 10)], seen
    if len({s[3] for s in seen}) > 1:
        break
pool = threads.pool()
assert (len({s[3] for s in seen}) > 1) == (pool > 1), (seen, pool)
assert tasks() == before + min(pool, 3) - 1, "more threads than the chunks needed"
assert "numba" not in sys.modules, "the pool imported numba"
child = os.fork()
if child == 0:
    ok = [s[:3] for s in run(10, 3)] == [(0, 0, 3), (1, 3, 6), (2, 6, 10)]
    os._exit(0 if ok else 1)
_, status = os.waitpid(child, 0)
assert status == 0, f"the forked child's loop failed: {status}"
print("ok")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
def test_a_fresh_process_starts_its_pool_without_numba_and_a_forked_child_its_own():
    """ensure() loads the runtime without importing numba; one chunk runs on the caller with
    no thread started; several start the threads they need (no more), and run on them; a
    forked child runs its loops too (on threads of its own)."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=HANG_S)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stdout + out.stderr


# a program as the generator makes them: compiled and loaded by jit.py (which resolves
# tj_rt_parallel_for through runtime.py's registration), called through the trampoline;
# args: the data (f64, S[0] of them) and each chunk's sum (S[1] chunks)
CHUNKED_SUM = """
declare void @tj_rt_parallel_for(ptr, ptr, i64, i64)

define void @chunk(ptr %args, i64 %c, i64 %lo, i64 %hi) {
entry:
  %data = load ptr, ptr %args
  %sums.at = getelementptr ptr, ptr %args, i64 1
  %sums = load ptr, ptr %sums.at
  %empty = icmp sge i64 %lo, %hi
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [%lo, %entry], [%i.next, %loop]
  %sum = phi double [0.0, %entry], [%sum.next, %loop]
  %x.at = getelementptr double, ptr %data, i64 %i
  %x = load double, ptr %x.at
  %sum.next = fadd double %sum, %x
  %i.next = add i64 %i, 1
  %more = icmp slt i64 %i.next, %hi
  br i1 %more, label %loop, label %done
done:
  %total = phi double [0.0, %entry], [%sum.next, %loop]
  %s.at = getelementptr double, ptr %sums, i64 %c
  store double %total, ptr %s.at
  ret void
}

define void @tj_entry(ptr %args, ptr %S) {
  %n = load i64, ptr %S
  %chunks.at = getelementptr i64, ptr %S, i64 1
  %chunks = load i64, ptr %chunks.at
  call void @tj_rt_parallel_for(ptr @chunk, ptr %args, i64 %n, i64 %chunks)
  ret void
}
"""


@pytest.mark.parametrize("n,chunks", [(1000, 2), (7, 3), (0, 2), (100, 1)])
def test_a_jit_program_runs_its_chunks_through_the_trampoline(pool, n, chunks):
    from tapejit.codegen.llvm import jit
    code = jit.Program(jit.compile_object(CHUNKED_SUM), ("tj_entry",))
    table, sizes = np.zeros(2, np.int64), np.array([n, chunks], np.int64)
    call = runtime.bind(code.address("tj_entry"), table, sizes, 2, keep=code)
    data, sums = np.random.default_rng(0).normal(size=n), np.full(chunks, np.nan)
    call(data, sums)
    bounds = [k * n // chunks for k in range(chunks + 1)]
    np.testing.assert_allclose(sums, [data[lo:hi].sum() for lo, hi in zip(bounds, bounds[1:])])


# ---- the allocator (alloc_ir.py) -------------------------------------------------------------
@pytest.fixture
def allocator():
    """tj_rt_alloc and tj_rt_free, with the cache empty before and after."""
    code = runtime.ensure().code
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64)(code.address("tj_rt_alloc"))
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(code.address("tj_rt_free"))
    runtime.release_memory()
    yield alloc, free
    runtime.release_memory()


@pytest.fixture
def small_limit():
    """The cache limited to three blocks of 4 * LARGE bytes."""
    limit = ctypes.c_int64.from_address(runtime.ensure().code.address("tj_rt_cache_limit"))
    saved, limit.value = limit.value, 3 * (4 * LARGE + HEADER)
    yield
    limit.value = saved


def test_a_large_block_freed_is_the_next_allocation_of_its_size(allocator):
    alloc, free = allocator
    n = 4 * LARGE
    a = alloc(n)
    ctypes.memset(a, 7, n)
    free(a)
    assert runtime.cached_bytes() == n + HEADER
    other = alloc(n + 8)                    # another size: a block of its own
    assert other != a and runtime.cached_bytes() == n + HEADER
    again = alloc(n)
    assert again == a and runtime.cached_bytes() == 0
    assert ctypes.string_at(again, 4) == b"\x07" * 4     # the same memory, as it was left
    free(again)
    free(other)
    assert runtime.cached_bytes() == 2 * n + 8 + 2 * HEADER
    runtime.release_memory()
    assert runtime.cached_bytes() == 0


def test_small_blocks_and_null_go_to_libc(allocator):
    alloc, free = allocator
    for n in (0, 1, 100, LARGE - HEADER - 1):
        p = alloc(n)
        assert p and p % 16 == 0
        ctypes.memset(p, 1, n)
        free(p)
    free(None)
    assert runtime.cached_bytes() == 0


def test_a_free_past_the_limit_empties_the_cache_first(allocator, small_limit):
    alloc, free = allocator
    n, block = 4 * LARGE, 4 * LARGE + HEADER
    kept = [alloc(n) for _ in range(4)]
    for p in kept[:3]:
        free(p)
    assert runtime.cached_bytes() == 3 * block
    free(kept[3])                          # the cache emptied, then this one kept
    assert runtime.cached_bytes() == block
    assert alloc(n) == kept[3]
    huge = alloc(4 * block)                # larger than the limit: never cached
    free(huge)
    assert runtime.cached_bytes() == 0


def test_threads_allocating_at_once_keep_the_cache_consistent(allocator, small_limit):
    alloc, free = allocator
    sizes = [k * LARGE for k in (1, 2, 3, 4)]
    failures = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(2000):
            n = int(rng.choice(sizes))
            p = alloc(n)
            if not p:
                failures.append(n)
                continue
            ctypes.memset(p, seed, 64)
            ctypes.memset(p + n - 64, seed, 64)
            if ctypes.string_at(p, 1) != bytes([seed]):
                failures.append(p)
            free(p)
    workers = [threading.Thread(target=work, args=(k + 1,)) for k in range(6)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(HANG_S)
    assert not failures and not any(w.is_alive() for w in workers)
    assert 0 < runtime.cached_bytes() <= 3 * (4 * LARGE + HEADER)
