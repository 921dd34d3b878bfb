"""The llvm generator's JIT layer and library (codegen/llvm/jit.py, library.py): hand-written IR
modules calling library kernels give numpy's results and vectorise; object code and kernels
come back from the disk cache in a new process without numba; a damaged cache file is
refused and rebuilt; closing a program frees its code."""
from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import textwrap
import warnings

import llvmlite.binding as llvm
import numpy as np
import pytest

from tapejit.disk import store
from tapejit.codegen.llvm import jit, library
from tapejit.config import reload as reload_config
from tapejit.errors import TapejitWarning
from hang import HANG_S

F8, F4, B1 = np.dtype(np.float64), np.dtype(np.float32), np.dtype(np.bool_)
EXP = "tj_vmath.exp(a0)"


@pytest.fixture(autouse=True)
def cache_dir(tmp_path_factory, monkeypatch):
    """One cache directory for the module's tests (kernels compile once)."""
    base = tmp_path_factory.getbasetemp() / "llvm-jit-cache"
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(base))
    monkeypatch.delenv("TAPEJIT_LIBRARY_DIR", raising=False)    # the kernels under `base`
    reload_config()
    yield base
    monkeypatch.undo()
    reload_config()


def _mem(dtype: np.dtype) -> str:
    return "i8" if dtype.kind == "b" else library.ir_type(dtype)


def loop_ir(kernel: library.Kernel, dtypes: tuple[np.dtype, ...], out: np.dtype) -> str:
    """IR of `tj_entry(ptr out, i64 n, ptr x0, ...)`: out[i] = kernel(x0[i], ...), for i < n;
    bools are bytes in memory, i1 in registers."""
    body, passed = [], []
    for j, dtype in enumerate(dtypes):
        body += [f"  %p{j} = getelementptr {_mem(dtype)}, ptr %x{j}, i64 %i",
                 f"  %m{j} = load {_mem(dtype)}, ptr %p{j}"]
        if dtype.kind == "b":
            body.append(f"  %v{j} = icmp ne i8 %m{j}, 0")
        passed.append(f"{library.ir_type(dtype)} %{'v' if dtype.kind == 'b' else 'm'}{j}")
    body.append(f"  %r = call {kernel.restype_ir} @{kernel.symbol}({', '.join(passed)})")
    if out.kind == "b":
        body.append("  %s = zext i1 %r to i8")
    params = "".join(f", ptr %x{j}" for j in range(len(dtypes)))
    return "\n".join([
        kernel.declaration,
        f"define void @tj_entry(ptr %out, i64 %n{params}) {{",
        "entry:", "  %any = icmp sgt i64 %n, 0", "  br i1 %any, label %loop, label %done",
        "loop:", "  %i = phi i64 [0, %entry], [%next, %loop]", *body,
        f"  %po = getelementptr {_mem(out)}, ptr %out, i64 %i",
        f"  store {_mem(out)} %{'s' if out.kind == 'b' else 'r'}, ptr %po",
        "  %next = add i64 %i, 1", "  %more = icmp slt i64 %next, %n",
        "  br i1 %more, label %loop, label %done", "done:", "  ret void", "}", ""])


def run_loop(program: jit.Program, out: np.ndarray, *xs: np.ndarray) -> np.ndarray:
    fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(xs) + 2))(
        program.address("tj_entry"))
    fn(out.ctypes.data, out.size, *(x.ctypes.data for x in xs))
    return out


def values(dtype: np.dtype) -> np.ndarray:
    """1,000 values: inf, nan, signed zeros, the smallest and largest, over- and underflow."""
    info = np.finfo(dtype)
    edge = [np.inf, -np.inf, np.nan, 0.0, -0.0, info.tiny, -info.tiny, info.smallest_subnormal,
            info.max, -info.max, 1e-30, 88.7, 89.0, -103.0, 709.7, 710.0, -745.1, -746.0]
    rng = np.random.default_rng(0)
    spread = np.concatenate([rng.uniform(-750, 750, 491), rng.uniform(-2, 2, 491)])
    return np.concatenate([edge, spread]).astype(dtype)


def packed(asm: str) -> bool:
    """Whether `asm` multiplies packed float64s in vector registers (the float32 kernels
    compute in float64 too)."""
    return bool(re.search(r"\bv?mulpd\s+%[xyz]mm", asm) or re.search(r"\bfmul\s+v\d+\.2d", asm))


@pytest.mark.parametrize("dtype,call", [(F8, EXP), (F4, "tj_vmath.exp_f32(a0)")])
def test_exp_loop_gives_numpys_results_and_vectorises(dtype, call):
    kernel = library.scalar_kernel(call, (dtype,))
    assert kernel.restype == dtype and kernel.argtypes_ir == (library.ir_type(dtype),)
    ir = loop_ir(kernel, (dtype,), dtype)
    assert packed(jit.assembly(ir))
    program = jit.Program(jit.compile_object(ir), ("tj_entry",))
    x = values(dtype)
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp(x)
    for _ in range(2):                              # the first call and a later one
        got = run_loop(program, np.empty_like(x), x)
        np.testing.assert_allclose(got, want, rtol=2 * np.finfo(dtype).eps, atol=0)
        assert np.array_equal(np.signbit(got), np.signbit(want))


def relocation_types(obj: bytes) -> set[tuple[str, int]]:
    """(section, relocation type) of each RELA entry of an ELF64 object file."""
    import struct
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    size, count, names = struct.unpack_from("<HHH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * size) for i in range(count)]
    strings = sections[names][4]
    found = set()
    for name, kind, _, _, offset, length, *_ in sections:
        if kind == 4:                                       # SHT_RELA
            section = obj[strings + name:obj.index(b"\0", strings + name)].decode()
            found |= {(section, struct.unpack_from("<Q", obj, at + 8)[0] & 0xFFFFFFFF)
                      for at in range(offset, offset + length, 24)}
    return found


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="x86-64 relocation numbers")
def test_object_code_has_no_32_bit_relocations(monkeypatch):
    """The large code model: every address in the object code is 64 bits (R_X86_64_64, and
    PC64 in .eh_frame), so a program loads wherever the memory manager maps its sections. With
    the small one, code reached its constants, kernels and unwind tables by 32-bit offsets, and
    LLVM aborted the process (RuntimeDyldELF: `isInt<32>(RealOffset)`) where a large mapping
    (libtorch's, a big array's) put a section more than 2 GB from another."""
    kernel = library.scalar_kernel(EXP, (F8,))
    table = ("@table = private constant [4 x double] [double 0.5, double 1.5, double 2.5, "
             "double 3.5]\n")
    ir = table + loop_ir(kernel, (F8,), F8).replace(
        "  %r = call", "  %k = and i64 %i, 3\n  %pt = getelementptr [4 x double], ptr @table, "
        "i64 0, i64 %k\n  %t = load double, ptr %pt\n  %r0 = call").replace(
        "  %po =", "  %r = fmul double %r0, %t\n  %po =")
    for budget in (jit.INLINE_BUDGET, 0):              # the kernel inlined, then called
        monkeypatch.setattr(jit, "INLINE_BUDGET", budget)
        obj = jit.compile_object(ir)
        assert {kind for _, kind in relocation_types(obj)} <= {1, 24}, relocation_types(obj)
        x = values(F8)[18:]
        got = run_loop(jit.Program(obj, ("tj_entry",)), np.empty_like(x), x)
        with np.errstate(over="ignore"):
            want = np.exp(x) * (0.5 + np.arange(x.size) % 4)
        np.testing.assert_allclose(got, want, rtol=4e-16)


def test_an_in_order_sum_of_kernel_values_vectorises():
    """jit.py sets -force-ordered-reductions (as vmath.py does for numba): the loop summing
    exp(x[i]) in order runs exp on vectors and gives the sequential sum bit for bit."""
    kernel = library.scalar_kernel(EXP, (F8,))
    ir = "\n".join([
        kernel.declaration, "define double @tj_entry(ptr %x, i64 %n) {", "entry:",
        "  br label %loop", "loop:", "  %i = phi i64 [0, %entry], [%next, %loop]",
        "  %acc = phi double [0.0, %entry], [%sum, %loop]",
        "  %p = getelementptr double, ptr %x, i64 %i", "  %v = load double, ptr %p",
        f"  %e = call double @{kernel.symbol}(double %v)", "  %sum = fadd double %acc, %e",
        "  %next = add i64 %i, 1", "  %more = icmp slt i64 %next, %n",
        "  br i1 %more, label %loop, label %done", "done:", "  ret double %sum", "}", ""])
    assert packed(jit.assembly(ir))
    program = jit.Program(jit.compile_object(ir), ("tj_entry",))   # kept: its code lives on
    total = ctypes.CFUNCTYPE(ctypes.c_double, ctypes.c_void_p, ctypes.c_int64)(
        program.address("tj_entry"))
    x = np.random.default_rng(2).uniform(-5, 5, 1001)
    each = run_loop(jit.Program(jit.compile_object(loop_ir(kernel, (F8,), F8)),
                                ("tj_entry",)), np.empty_like(x), x)
    expected = 0.0
    for value in each:
        expected += value
    assert total(x.ctypes.data, x.size) == expected


@pytest.mark.parametrize("call,reference",
                         [("math.lgamma(a0)", "gammaln"), ("np.cbrt(a0)", "cbrt")])
def test_kernels_calling_libm(call, reference):
    """numba's math.lgamma and np.cbrt call libm: the symbols resolve from the process."""
    import scipy.special
    kernel = library.scalar_kernel(call, (F8,))
    program = jit.Program(jit.compile_object(loop_ir(kernel, (F8,), F8)), ("tj_entry",))
    x = np.concatenate([[np.inf, np.nan], np.linspace(-30.5, 170.5, 998)])   # not -inf: +inf
    want = getattr(scipy.special, reference)(x)
    np.testing.assert_allclose(run_loop(program, np.empty_like(x), x), want, rtol=1e-13)


def test_modules_compile_on_threads_at_once():
    from concurrent.futures import ThreadPoolExecutor
    kernel = library.scalar_kernel(EXP, (F8,))
    texts = [loop_ir(kernel, (F8,), F8) + f"; copy {c}\n" for c in range(6)]
    with ThreadPoolExecutor(3) as pool:
        objects = list(pool.map(jit.compile_object, texts))
    x = values(F8)
    for obj in objects:
        got = run_loop(jit.Program(obj, ("tj_entry",)), np.empty_like(x), x)
        with np.errstate(over="ignore", under="ignore"):
            np.testing.assert_allclose(got, np.exp(x), rtol=4e-16, atol=0)


def test_a_kernel_needing_numbas_memory_manager_is_refused():
    with pytest.raises(jit.JitError, match="memory manager.*NRT_MemInfo"):
        library.scalar_kernel("np.empty(3).sum() + a0", (F8,))


def test_bool_argument_and_result():
    choose = library.scalar_kernel("tj_vmath.exp(a1) if a0 else a1", (B1, F8))
    big = library.scalar_kernel("a0 > 1.0", (F8,))
    assert choose.argtypes_ir == ("i1", "double") and choose.restype == F8
    assert big.restype == B1 and big.restype_ir == "i1"
    x = values(F8)
    mask = np.arange(x.size) % 3 == 0
    chosen = jit.Program(jit.compile_object(loop_ir(choose, (B1, F8), F8)), ("tj_entry",))
    with np.errstate(over="ignore", under="ignore"):
        want = np.where(mask, np.exp(x), x)
    np.testing.assert_allclose(run_loop(chosen, np.empty_like(x), mask, x), want,
                               rtol=4e-16, atol=0)
    compared = jit.Program(jit.compile_object(loop_ir(big, (F8,), B1)), ("tj_entry",))
    got = run_loop(compared, np.empty(x.size, np.bool_), x)
    assert np.array_equal(got, x > 1.0)


# ---- matrix products -------------------------------------------------------------------------

def product_ir(kernel: library.Kernel) -> str:
    return f"""{kernel.declaration}
define void @tj_entry(ptr %a, ptr %b, ptr %out, i64 %m, i64 %n, i64 %k, i64 %ta, i64 %tb,
                      i64 %threads) {{
  %fa = icmp ne i64 %ta, 0
  %fb = icmp ne i64 %tb, 0
  call void @{kernel.symbol}(ptr %a, ptr %b, ptr %out, i64 %m, i64 %n, i64 %k, i1 %fa, i1 %fb,
                             i64 %threads)
  ret void
}}
"""


def test_matmul_kernel_matches_numpy_in_every_layout():
    from tapejit.codegen import blas
    from tapejit.codegen.llvm import runtime
    runtime.ensure()                    # tj_rt_parallel_for, on the runtime's pool
    assert (library.GRAIN, library.SIDE) == (blas.GRAIN, blas.SIDE)
    rng = np.random.default_rng(1)
    # (m, n, k, threads): one BLAS call; blocks of rows; blocks of columns; empty
    shapes = [(3, 5, 4, 1), (300, 120, 128, 2), (70, 400, 160, 2), (4, 6, 0, 1), (0, 3, 2, 1)]
    for dtype in (F8, F4):
        kernel = library.matmul(dtype)
        assert kernel.argtypes_ir[6:8] == ("i1", "i1")
        program = jit.Program(jit.compile_object(product_ir(kernel)), ("tj_entry",))
        fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 3, *[ctypes.c_int64] * 6)(
            program.address("tj_entry"))
        for m, n, k, threads in shapes:
            assert (blas.parts.py_func(m, n, k, threads) > 1) == (threads > 1)
            for ta in (0, 1):
                for tb in (0, 1):
                    a = rng.standard_normal((k, m) if ta else (m, k)).astype(dtype)
                    b = rng.standard_normal((n, k) if tb else (k, n)).astype(dtype)
                    out = np.full((m, n), np.nan, dtype)
                    fn(a.ctypes.data, b.ctypes.data, out.ctypes.data, m, n, k, ta, tb, threads)
                    want = (a.T if ta else a) @ (b.T if tb else b)
                    np.testing.assert_allclose(out, want, rtol=1e-4 if dtype == F4 else 1e-12,
                                               atol=1e-4 if dtype == F4 else 1e-12)


def test_matmul_of_other_dtypes_is_refused():
    with pytest.raises(jit.JitError, match="float64 or float32"):
        library.matmul(np.dtype(np.int64))


# ---- the disk cache --------------------------------------------------------------------------

FRESH = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path.insert(0, {tests!r})
    from test_llvm_jit import loop_ir, run_loop, F8
    from tapejit.codegen.llvm import jit, library
    kernels = [library.scalar_kernel(call, (F8,)) for call in {calls!r}]
    ir = loop_ir(kernels[0], (F8,), F8) + "".join(k.declaration + "\\n" for k in kernels[1:])
    obj, from_disk = jit.cached_bytes("obj", ir, lambda: jit.compile_object(ir))
    x = np.frombuffer(bytes.fromhex({x!r}), np.float64)
    got = run_loop(jit.Program(obj, ("tj_entry",)), np.empty_like(x), x)
    registry = sys.modules.get("numba.core.registry")      # numba's compiler made a target?
    compiled = registry is not None and "_toplevel_target_context" in vars(registry.cpu_target)
    print(json.dumps([compiled, from_disk, got.tolist(), "numba" in sys.modules]))
""")


def fresh_process(base, calls: list[str], x: np.ndarray) -> tuple[bool, bool, np.ndarray, bool]:
    """(numba compiled, object code from disk, the results, numba imported) of a new process
    making `calls`' kernels and a loop of the first on `x`."""
    script = FRESH.format(tests=os.path.dirname(__file__), calls=calls, x=x.tobytes().hex())
    env = {**os.environ, "TAPEJIT_CACHE_DIR": str(base)}
    env.pop("TAPEJIT_LIBRARY_DIR", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr
    compiled, from_disk, got, imported = json.loads(done.stdout.splitlines()[-1])
    return compiled, from_disk, np.array(got, np.float64), imported


def files(base, folder: str) -> list:
    return sorted((store.cache_root() / "llvm" / folder).iterdir())


def flip_a_byte(path) -> None:
    data = bytearray(path.read_bytes())
    data[-10] ^= 1
    path.write_bytes(bytes(data))


def test_a_new_process_loads_kernels_and_object_code_without_numba(cache_dir):
    x = values(F8)
    with np.errstate(over="ignore", under="ignore"):
        want = np.exp(x)
    calls = [EXP, "tj_vmath.log(a0)"]

    def fresh() -> tuple[bool, bool, bool]:
        compiled, from_disk, got, imported = fresh_process(cache_dir, calls, x)
        np.testing.assert_allclose(got, want, rtol=4e-16, atol=0)
        return compiled, from_disk, imported

    fresh()                                             # fills the cache (or finds it full)
    assert fresh() == (False, True, False)              # numba not even imported
    kernel = next(f for f in files(cache_dir, "lib")
                  if library.scalar_kernel(EXP, (F8,)).symbol.encode() in f.read_bytes())
    flip_a_byte(kernel)
    assert fresh() == (True, True, True)                # numba compiled the kernel again
    assert fresh() == (False, True, False)              # ... and kept it


def test_kernels_calling_numbas_helpers_load_without_its_compiler(cache_dir):
    """math.gamma is numba's C helper numba_gamma: loading it loads numba's helper library
    alone (extensions.load_alone): numba's package is not imported, nothing compiles."""
    import scipy.special
    x = np.concatenate([[np.inf, np.nan, 0.0, -2.5, -0.5], np.linspace(0.1, 171.5, 995)])
    for first in (True, False):
        compiled, from_disk, got, imported = fresh_process(cache_dir, ["math.gamma(a0)"], x)
        np.testing.assert_allclose(got, scipy.special.gamma(x), rtol=1e-13)
        if not first:
            assert (compiled, from_disk, imported) == (False, True, False)


def test_a_damaged_or_linked_object_file_is_rebuilt(cache_dir, tmp_path):
    kernel = library.scalar_kernel(EXP, (F8,))
    ir = loop_ir(kernel, (F8,), F8) + "; the damaged-file test's\n"
    builds = []
    build = lambda: builds.append(1) or jit.compile_object(ir)  # noqa: E731
    first, from_disk = jit.cached_bytes("obj", ir, build)
    assert (from_disk, len(builds)) == (False, 1)
    assert jit.cached_bytes("obj", ir, build) == (first, True) and len(builds) == 1
    path = max(files(cache_dir, "obj"), key=lambda f: f.stat().st_mtime_ns)   # just written
    flip_a_byte(path)
    assert jit.cached_bytes("obj", ir, build) == (first, False) and len(builds) == 2
    assert jit.cached_bytes("obj", ir, build) == (first, True) and len(builds) == 2
    planted = tmp_path / "planted.o"
    planted.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(planted)                            # a link is no file of the cache's
    assert jit.cached_bytes("obj", ir, build) == (first, False) and len(builds) == 3
    assert not path.is_symlink()


def test_an_unusable_cache_directory_means_memory_only(tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(blocker))
    monkeypatch.setattr(store, "_warned", set())
    reload_config()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert jit.cached_bytes("obj", "some key", lambda: b"built") == (b"built", False)
        assert jit.cached_bytes("obj", "some key", lambda: b"built") == (b"built", False)
    assert [w.category for w in caught] == [TapejitWarning]
    assert "in memory only" in str(caught[0].message)


# ---- loading and freeing ---------------------------------------------------------------------

CALLS = """declare i64 @{0}(i64)
define i64 @tj_entry(i64 %x) {{
  %y = call i64 @{0}(i64 %x)
  ret i64 %y
}}
"""
_triple = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(lambda x: 3 * x)


def call(program: jit.Program, x: int) -> int:
    return ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(program.address("tj_entry"))(x)


def test_symbols_resolve_from_add_symbol_add_external_and_the_process():
    llvm.add_symbol("tj_rt_test_triple", ctypes.cast(_triple, ctypes.c_void_p).value)
    jit.add_external("tj_ext_test_triple", lambda: ctypes.cast(_triple, ctypes.c_void_p).value)
    for name in ("tj_rt_test_triple", "tj_ext_test_triple"):
        program = jit.Program(jit.compile_object(CALLS.format(name)), ("tj_entry",))
        assert call(program, 14) == 42
    program = jit.Program(jit.compile_object(CALLS.format("labs")), ("tj_entry",))
    assert call(program, -7) == 7                       # libc's, found in the process
    with pytest.raises(jit.JitError, match="tj_rt_not_registered"):
        jit.Program(jit.compile_object(CALLS.format("tj_rt_not_registered")), ("tj_entry",))


def test_bad_ir_and_unknown_kernels_are_clear_errors():
    with pytest.raises(jit.JitError, match="LLVM rejects"):
        jit.compile_object("define void @tj_entry( {")
    with pytest.raises(jit.JitError, match="no kernel of this process"):
        jit.compile_object(CALLS.format("tj_lib_never_made"))


def jitted_code() -> int:
    """Bytes of anonymous executable memory mapped in this process (JIT-compiled code)."""
    total = 0
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms, *rest = line.split()
            if "x" in perms and len(rest) == 3:         # no file behind it
                lo, hi = (int(x, 16) for x in span.split("-"))
                total += hi - lo
    return total


def test_close_frees_the_code():
    obj = jit.compile_object(CALLS.format("labs"))
    jit.Program(obj, ("tj_entry",)).close()
    before = jitted_code()
    programs = [jit.Program(obj, ("tj_entry",)) for _ in range(50)]
    assert [call(p, -2) for p in programs] == [2] * 50
    assert jitted_code() >= before + 50 * 4096          # a page (at least) of code each
    for program in programs[:25]:
        program.close()
        with pytest.raises(jit.JitError, match="closed"):
            program.address("tj_entry")
    del programs                                        # garbage collection closes the rest
    assert jitted_code() <= before


def test_a_dropped_program_frees_its_code_without_the_cycle_collector():
    """Nothing but its users holds a program's code (no reference cycle): the last one
    dropped, by the user or by `tj.clear_cache()`, frees it at once."""
    import gc
    import weakref

    import tapejit as tj
    from tapejit.codegen.llvm import program as loaded
    x = np.linspace(0.0, 1.0, 7)
    dropped = [tj.jit(lambda x: np.sin(x) * 3.25 + 0.5), tj.jit(lambda x: np.cos(x) * 1.75)]
    codes = []
    for f in dropped:
        before = set(loaded._loaded)
        f(x)
        [key] = set(loaded._loaded) - before
        codes.append(weakref.ref(loaded._loaded[key]))
    gc.collect()
    gc.disable()
    try:
        del f
        dropped.pop()                 # the user drops it
        assert codes[1]() is None
        assert codes[0]() is not None
        tj.clear_cache()              # the function lives on, its programs are dropped
        assert codes[0]() is None
    finally:
        gc.enable()
