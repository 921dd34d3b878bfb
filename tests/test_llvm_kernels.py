"""Library kernels called, not inlined (codegen/llvm/called_kernels.py, jit.py `_inlined`): a
large kernel's vector variants give the scalar entry's bits (float64, float32, bools; every
width, loops of every length around the vector width, special values); a module calling it
at many places calls it (vectorised loops through a variant) and one calling it at few
places inlines it, with the same bits; small kernels are only ever inlined."""
from __future__ import annotations

import ctypes
import re
from collections import Counter

import numpy as np
import pytest

from tapejit.codegen.llvm import called_kernels, jit, library
from test_llvm_jit import B1, F4, F8, cache_dir, loop_ir, run_loop, values  # noqa: F401

SIN = {F8: "tj_vmath.sin(a0)", F4: "tj_vmath.sin_f32(a0)"}
# the vector widths LLVM may pick for a loop of these: 256 or 512 bits, as the host CPU
# prefers (Intel's AVX-512 cores 256, AMD's Zen 4 512)
LANES = {F8: (4, 8), F4: (8, 16)}


def variants_called(asm: str, kernel: library.Kernel, dtype) -> tuple[int, list[str]]:
    """The width of the kernel's variant the vectoriser called in `asm` (one of LANES), and
    the calls of the kernel and its variants there."""
    found = calls(asm, kernel.symbol)
    widths = {w for w in LANES[dtype] if called_kernels.variant(kernel.symbol, w) in found}
    assert len(widths) == 1, found
    return widths.pop(), found


def calls(asm: str, symbol: str) -> list[str]:
    """The names `asm` calls that are `symbol` or one of its variants: direct calls, and (the
    large code model) calls through a register that `movabsq $name, %reg` loaded."""
    name = rf"{symbol}(?:_v\d+)?"
    held: dict[str, str] = {}
    found = []
    for line in asm.splitlines():
        if loaded := re.search(rf"\bmovabs\w*\s+\$({name}),\s*(%\w+)", line):
            held[loaded.group(2)] = loaded.group(1)
        elif (through := re.search(r"\bcall\w*\s+\*(%\w+)", line)) and through.group(1) in held:
            found.append(held[through.group(1)])
        elif direct := re.search(rf"\bcall\w*\s+({name})\b", line):
            found.append(direct.group(1))
    return found


def compiled(ir: str) -> jit.Program:
    return jit.Program(jit.compile_object(ir), ("tj_entry",))


def scalar_ir(kernel: library.Kernel, dtypes, out) -> str:
    """`loop_ir` with its loop kept scalar: each element through the scalar entry."""
    text = loop_ir(kernel, dtypes, out).replace(
        "label %done\ndone:", "label %done, !llvm.loop !0\ndone:")
    return text + '!0 = distinct !{!0, !{!"llvm.loop.vectorize.enable", i1 false}}\n'


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint8)


@pytest.fixture
def called(monkeypatch):
    """Modules call every large kernel (no inlining budget)."""
    monkeypatch.setattr(jit, "INLINE_BUDGET", 0)


@pytest.mark.parametrize("dtype", [F8, F4])
def test_a_loop_through_the_vector_variant_gives_the_scalar_entrys_bits(dtype, called):
    kernel = library.scalar_kernel(SIN[dtype], (dtype,))
    ir = loop_ir(kernel, (dtype,), dtype)
    lanes, found = variants_called(jit.assembly(ir), kernel, dtype)
    # the remainder: the scalar entry, or a narrower variant (LLVM's epilogue vectorisation)
    assert set(found) <= {kernel.symbol, *(called_kernels.variant(kernel.symbol, w)
                                           for w in called_kernels.WIDTHS if w <= lanes)}
    vector, scalar = compiled(ir), compiled(scalar_ir(kernel, (dtype,), dtype))
    assert calls(jit.assembly(scalar_ir(kernel, (dtype,), dtype)), kernel.symbol) == \
        [kernel.symbol]
    x = values(dtype)
    for n in (0, 1, lanes - 1, lanes, lanes + 1, 1000):
        for _ in range(2):                          # the first call and a later one
            got = run_loop(vector, np.full(n, 7, dtype), x[:n])
            want = run_loop(scalar, np.full(n, 7, dtype), x[:n])
            assert np.array_equal(bits(got), bits(want)), n
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(got, np.sin(x), rtol=4 * np.finfo(dtype).eps, atol=1e-300)


def variant_ir(kernel: library.Kernel, width: int, dtypes) -> str:
    """`tj_entry(ptr out, ptr x0, ...)`: one call of the kernel's variant on `width` lanes."""
    def vector(t: str) -> str:
        return f"<{width} x {t}>"
    name = called_kernels.variant(kernel.symbol, width)
    lines, passed = [], []
    for j, dtype in enumerate(dtypes):
        t = library.ir_type(dtype)
        if t == "i1":
            lines += [f"  %m{j} = load {vector('i8')}, ptr %x{j}, align 1",
                      f"  %v{j} = icmp ne {vector('i8')} %m{j}, zeroinitializer"]
        else:
            lines.append(f"  %v{j} = load {vector(t)}, ptr %x{j}, align 1")
        passed.append(f"{vector(t)} %v{j}")
    params = "".join(f", ptr %x{j}" for j in range(len(dtypes)))
    ret, stored = vector(kernel.restype_ir), "%r"
    lines.append(f"  %r = call {ret} @{name}({', '.join(passed)})")
    if kernel.restype_ir == "i1":
        lines.append(f"  %s = zext {ret} %r to {vector('i8')}")
        ret, stored = vector("i8"), "%s"
    return "\n".join([
        kernel.declaration, f"define void @tj_entry(ptr %out{params}) {{", *lines,
        f"  store {ret} {stored}, ptr %out, align 1", "  ret void", "}", ""])


CASES = [("tj_vmath.sin(a0)", (F8,)), ("tj_vmath.exp_f32(a0)", (F4,)),
         ("tj_vmath.pow(a0, a1)", (F8, F8)), ("tj_vmath.exp(a1) if a0 else a1", (B1, F8)),
         ("tj_vmath.exp(a0) > 2.0", (F8,))]


def inputs(dtypes, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    return [rng.integers(0, 2, n).astype(bool) if t == B1 else
            np.roll(values(t), 5 * j)[:n] for j, t in enumerate(dtypes)]


@pytest.mark.parametrize("call,dtypes", CASES)
def test_every_variant_gives_the_scalar_entrys_bits(call, dtypes):
    """Each width's variant, called directly, on special values (nan, inf, -0.0, ...)."""
    kernel = library.scalar_kernel(call, dtypes)
    assert "vector-function-abi-variant" in kernel.declaration
    scalar = compiled(scalar_ir(kernel, dtypes, kernel.restype))
    for width in called_kernels.WIDTHS:
        program = compiled(variant_ir(kernel, width, dtypes))
        entry = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * (len(dtypes) + 1))(
            program.address("tj_entry"))
        for start in range(0, 200, width):
            xs = [x[start:start + width].copy() for x in inputs(dtypes, 200)]
            got = np.full(width, 7, kernel.restype)
            entry(got.ctypes.data, *(x.ctypes.data for x in xs))
            want = run_loop(scalar, np.empty(width, kernel.restype), *xs)
            assert np.array_equal(bits(got), bits(want)), (width, start)


def chain_ir(kernel: library.Kernel, places: int) -> str:
    """`tj_entry(ptr out, i64 n, ptr x)`: out[i] = kernel applied `places` times to x[i]."""
    steps = [f"  %y{k + 1} = call double @{kernel.symbol}(double %y{k})" for k in range(places)]
    return "\n".join([
        kernel.declaration, "define void @tj_entry(ptr %out, i64 %n, ptr %x) {", "entry:",
        "  %any = icmp sgt i64 %n, 0", "  br i1 %any, label %loop, label %done", "loop:",
        "  %i = phi i64 [0, %entry], [%next, %loop]",
        "  %p = getelementptr double, ptr %x, i64 %i", "  %y0 = load double, ptr %p", *steps,
        "  %q = getelementptr double, ptr %out, i64 %i", f"  store double %y{places}, ptr %q",
        "  %next = add i64 %i, 1", "  %more = icmp slt i64 %next, %n",
        "  br i1 %more, label %loop, label %done", "done:", "  ret void", "}", ""])


def test_many_call_sites_call_few_inline_with_the_same_bits():
    """sin at 300 places is called (300 vectorised calls, 300 in the remainder); at 2 places
    (2 x 172 instructions, within jit.INLINE_BUDGET) inlined: no call at all."""
    kernel = library.scalar_kernel(SIN[F8], (F8,))
    assert kernel.symbol in jit._sizes          # large: loaded to be called, sized
    lanes, many = variants_called(jit.assembly(chain_ir(kernel, 300)), kernel, F8)
    assert many.count(called_kernels.variant(kernel.symbol, lanes)) == 300
    assert many.count(kernel.symbol) == 300
    assert calls(jit.assembly(chain_ir(kernel, 2)), kernel.symbol) == []
    x = values(F8)
    got = run_loop(compiled(chain_ir(kernel, 300)), np.empty_like(x), x)
    want = x
    for _ in range(300):
        want = run_loop(compiled(chain_ir(kernel, 1)), np.empty_like(x), want)
    assert np.array_equal(bits(got), bits(want))


def test_small_kernels_are_only_inlined(called):
    kernel = library.scalar_kernel("np.maximum(a0, a1)", (F8, F8))
    assert kernel.declaration == f"declare double @{kernel.symbol}(double, double)"
    assert not jit.by_address(kernel.symbol)
    asm = jit.assembly(loop_ir(kernel, (F8, F8), F8))
    assert calls(asm, kernel.symbol) == []


def test_a_gradient_calling_sin_at_many_places_runs_compiled(monkeypatch):
    """40 unrolled steps of sin: the llvm generator's program calls the kernel (40 x 172
    instructions exceed jit.INLINE_BUDGET); values and gradient, first and later calls, agree
    with the interpreter (numpy's sin and sums: to rounding) as TAPEJIT_VERIFY checks."""
    import tapejit as tj
    from test_reroll import rerolling

    def f(x):
        for k in range(40):
            x = np.sin(x) * 1.0001 + 0.001 * k
        return np.sum(x * x)

    monkeypatch.setenv("TAPEJIT_CODEGEN", "llvm")
    modules, inlined = [], jit._inlined
    monkeypatch.setattr(jit, "_inlined", lambda ir: modules.append(ir) or inlined(ir))
    x = np.concatenate([[0.0, -0.0, 1e-300, 1e300], np.linspace(-3, 3, 97)])
    with rerolling(False):
        compiled = tj.value_and_grad(f)
        reference = tj.value_and_grad(f, backend="interpret")
        for _ in range(2):
            (value, grad), (want, want_grad) = compiled(x), reference(x)
            np.testing.assert_allclose(value, want, rtol=1e-13)      # numpy's sin, sum
            np.testing.assert_allclose(grad, want_grad, rtol=1e-12, atol=1e-300)
    assert compiled.cache_info()["codegen"] == {"llvm": 1, "numba": 0}
    called = {s for ir in modules for s, n in Counter(jit._KERNEL_USE.findall(ir)).items()
              if s in jit._sizes and s not in inlined(ir) and n > 40}
    assert len(called) == 2                         # sin, and cos in the gradient


def test_building_kernels_says_nothing_on_stderr(tmp_path, monkeypatch, capfd):
    """Kernels whose lane loop does not vectorise (zeta's series loop; polygamma calls libm's
    tan and numba's gamma: no variants) build quietly: LLVM prints no remark."""
    from tapejit.config import reload as reload_config
    monkeypatch.setenv("TAPEJIT_LIBRARY_DIR", str(tmp_path))       # built here, now
    reload_config()
    zeta = library.scalar_kernel("tj_special.zeta(a0, a1)", (F8, F8))
    polygamma = library.scalar_kernel("tj_special.polygamma(a0, a1)", (np.dtype(np.int64), F8))
    assert "vector-function-abi-variant" not in polygamma.declaration
    assert jit.by_address(zeta.symbol) and jit.by_address(polygamma.symbol)
    assert capfd.readouterr().err == ""
