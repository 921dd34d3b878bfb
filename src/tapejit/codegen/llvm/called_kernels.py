"""Library kernels that programs may call instead of inlining: each scalar kernel larger than
INLINE_LIMIT instructions is also compiled once per machine into object code of its own, with
vector variants, loaded into the process once and called by address. jit.py inlines such a
kernel where a module calls it at few places (`jit.INLINE_BUDGET`) and calls it elsewhere, so
a program calling sin at 300 places compiles 300 calls, not 600 copies of sin (one in the
vectorised loop body, one in the scalar remainder, per place).

    obj, declaration = build(wrapped, symbol, ("double",), "double")   # library.py, once
    load(obj)                       # the process resolves `symbol` and its variants to it

INLINE_LIMIT: the sizes of numba's kernel modules with their wrapper (`size`) are sin 172,
pow 193, tanh 91, exp and log 48, exp_f32 36; np.cbrt 17, np.maximum 12, floor_divide 8,
copysign 7. A call, with the vector registers it spills, costs about as much as the smallest
ones: they are only ever inlined.

`build` makes, from numba's function (wrapped as `<symbol>.one`, alwaysinline), `<symbol>`, the
scalar entry, and `<symbol>_v<VF>` for VF in WIDTHS: `<VF x T> (<VF x T>, ...)`, a loop over the
lanes (stored in memory; bools as bytes) calling the scalar code, which the loop vectoriser
turns into vector code on as many lanes as it prefers (4 float64s or 8 float32s here: a wider
variant loops over them; `llvm.loop.unroll.disable`, or LLVM unrolls a small kernel's loop
first and leaves it scalar; no `llvm.loop.vectorize.width`, with which LLVM prints a remark on
stderr for each loop it cannot vectorise). A kernel calling a function (libm's tan, numba's
helpers) has no variants (`widths`). A program's declaration names the
variants in LLVM's "vector-function-abi-variant" attribute (VFABI names:
`_ZGV_LLVM_N<VF><a v per parameter>_<symbol>(<variant>)`), so the vectoriser calls `<symbol>_v4`
on four lanes where it would inline four copies of the kernel, and the scalar remainder calls
`<symbol>`. The declarations carry the attributes LLVM inferred for the scalar entry
(nounwind, willreturn, memory(none), ...); one it does not find free of memory effects gets
no variants (the vectoriser would not call it on vectors anyway).

WIDTHS: on x86-64 with AVX2 or AVX-512 (which LLVM prefers at 256 bits) the vectoriser picks
4 lanes for loops holding float64 or int64 values and 8 for float32 ones; 16 serves CPUs
preferring 512 bits. No 2: LLVM's scalar passes take a two-lane loop apart before the
vectoriser runs (SROA), and a loop it then cannot vectorise would run on one lane at a time
(on a CPU whose vectors hold two float64s, loops call the scalar entry per element).
"""
from __future__ import annotations

import re
from typing import Callable

import llvmlite.binding as llvm

from . import jit

INLINE_LIMIT = 20                    # instructions (the module docstring)
WIDTHS = (4, 8, 16)
_EFFECTS = ("nounwind", "willreturn", "nofree", "nosync", "norecurse", "memory(none)")
_programs: list[jit.Program] = []    # loaded once, kept for the process's life


def size(module: llvm.ModuleRef) -> int:
    """The instructions of the kernel `module` holds (numba's, wrapped)."""
    return sum(len(list(b.instructions)) for f in module.functions for b in f.blocks)


def widths(module: llvm.ModuleRef) -> tuple[int, ...]:
    """The widths of the variants of the kernel `module` holds: none where it calls a function
    (libm's tan, numba's helpers: the vectoriser cannot widen the call)."""
    calls_out = any(f.is_declaration and not f.name.startswith("llvm.") for f in module.functions)
    return () if calls_out else WIDTHS


def build(wrapped: Callable[[str, str, tuple[str, ...]], llvm.ModuleRef], symbol: str,
          params: tuple[str, ...], ret: str, lanes: tuple[int, ...]) -> tuple[bytes, str]:
    """(object code of `symbol` and its variants on `lanes`, the declarations programs hold)
    from `wrapped(name, ir, exports)`: numba's module with its wrapper `name` and `ir` linked
    in."""
    exports = (symbol, *(variant(symbol, w) for w in lanes))
    module = wrapped(_one(symbol), _entries(symbol, params, ret, lanes), exports)
    jit.optimise(module)
    return (jit.target_machine().emit_object(module),
            _declaration(module, symbol, params, ret, lanes))


def load(obj: bytes) -> None:
    """Load `obj` into the process for good; its symbols resolve to it in later programs."""
    program = jit.Program(obj, tuple(jit.defined_symbols(obj)))
    _programs.append(program)
    for symbol in program.exports:
        jit.add_external(symbol, lambda s=symbol: program.address(s))


def variant(symbol: str, width: int) -> str:
    """The name of the kernel `symbol`'s variant on `width` lanes."""
    return f"{symbol}_v{width}"


def _one(symbol: str) -> str:
    return symbol + ".one"


def _entries(symbol: str, params: tuple[str, ...], ret: str, lanes: tuple[int, ...]) -> str:
    """IR of `symbol` and its vector variants, each calling `_one(symbol)`."""
    args = ", ".join(f"{t} %a{i}" for i, t in enumerate(params))
    lines = [f"define {ret} @{symbol}({args}) {{", f"  %r = call {ret} @{_one(symbol)}({args})",
             f"  ret {ret} %r", "}"]
    for width in lanes:
        lines += _variant(symbol, width, params, ret)
    return "\n".join(lines) + "\n"


def _variant(symbol: str, width: int, params: tuple[str, ...], ret: str) -> list[str]:
    """IR of `<symbol>_v<width>`: the lanes stored in memory, the scalar code looped over."""
    def vector(t: str) -> str:
        return f"<{width} x {t}>"

    def memory(t: str) -> str:
        return "i8" if t == "i1" else t

    head = [f"define {vector(ret)} @{variant(symbol, width)}("
            + ", ".join(f"{vector(t)} %a{i}" for i, t in enumerate(params)) + ") {", "entry:"]
    loop = ["loop:", "  %i = phi i64 [0, %entry], [%next, %loop]"]
    passed = []
    for i, t in enumerate(params):
        lanes = f"%a{i}"
        if t == "i1":
            head.append(f"  %w{i} = zext {vector(t)} %a{i} to {vector('i8')}")
            lanes = f"%w{i}"
        head += [f"  %in{i} = alloca [{width} x {memory(t)}], align 64",
                 f"  store {vector(memory(t))} {lanes}, ptr %in{i}"]
        loop += [f"  %p{i} = getelementptr {memory(t)}, ptr %in{i}, i64 %i",
                 f"  %m{i} = load {memory(t)}, ptr %p{i}"]
        if t == "i1":
            loop.append(f"  %x{i} = trunc i8 %m{i} to i1")
        passed.append(f"{t} %{'x' if t == 'i1' else 'm'}{i}")
    head += [f"  %out = alloca [{width} x {memory(ret)}], align 64", "  br label %loop"]
    loop.append(f"  %r = call {ret} @{_one(symbol)}({', '.join(passed)})")
    if ret == "i1":
        loop.append("  %s = zext i1 %r to i8")
    loop += [f"  %q = getelementptr {memory(ret)}, ptr %out, i64 %i",
             f"  store {memory(ret)} {'%s' if ret == 'i1' else '%r'}, ptr %q",
             "  %next = add i64 %i, 1", f"  %more = icmp ult i64 %next, {width}",
             f"  br i1 %more, label %loop, label %done, !llvm.loop !{width}"]
    done = ["done:", f"  %v = load {vector(memory(ret))}, ptr %out"]
    if ret == "i1":
        done.append(f"  %b = trunc {vector('i8')} %v to {vector('i1')}")
    return head + loop + done + [
        f"  ret {vector(ret)} {'%b' if ret == 'i1' else '%v'}", "}",
        f"!{width} = distinct !{{!{width}, !{{!\"llvm.loop.unroll.disable\"}}}}"]


def _declaration(module: llvm.ModuleRef, symbol: str, params: tuple[str, ...], ret: str,
                 lanes: tuple[int, ...]) -> str:
    """The declarations a program calling the kernel of `module` (optimised) holds."""
    inferred = " ".join(a.decode() for a in module.get_function(symbol).attributes)
    effects = " ".join(e for e in _EFFECTS if re.search(rf"(^|\s){re.escape(e)}", inferred))
    scalar = f"declare {ret} @{symbol}({', '.join(params)}) {effects}"
    if "memory(none)" not in effects or not lanes:
        return scalar
    names = ",".join(f"_ZGV_LLVM_N{w}{'v' * len(params)}_{symbol}({variant(symbol, w)})"
                     for w in lanes)
    lines = [f"declare <{w} x {ret}> @{variant(symbol, w)}("
             + ", ".join(f"<{w} x {t}>" for t in params) + f") {effects}" for w in lanes]
    return "\n".join([*lines, f'{scalar} "vector-function-abi-variant"="{names}"'])
