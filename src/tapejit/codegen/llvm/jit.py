"""Compile and load the llvm generator's modules: LLVM IR text -> optimised object code ->
machine code in this process, with object code cached on disk per program.

    obj = compile_object(ir)       # links the tj_lib_ kernels `ir` declares; O3; object code
    obj, from_disk = cached_bytes("lib", key, lambda: compile_object(ir))
    program = Program(obj, ("tj_entry",))
    address = program.address("tj_entry")
    program.close()                # frees its code (as garbage collection does)

`compile_object` parses the text in an LLVM context of its own, with a target machine of the
thread's own, so modules compile on several threads at once (llvmlite releases the GIL). It
links the bitcode of each `tj_lib_` kernel the module declares (library.py registers them with
`add_kernel`) but of those also loaded to be called (called_kernels.py) where the module calls
them at too many places (`_inlined`, INLINE_BUDGET): it keeps their vector variants declared
for the vectoriser (`_variants_kept`). It makes every definition but the `tj_entry*` ones
internal (LLVM then inlines the kernels and drops what is unused) and optimises as numba does
under error_model="numpy": O3, the loop vectoriser, no fast-math flags, for the host CPU and
its features (NUMBA_CPU_NAME and NUMBA_CPU_FEATURES override them, as they do numba's). Loops
holding in-order float sums vectorise under `-force-ordered-reductions`, set here as vmath.py
sets it for numba.

`Program` loads object code into the process's ORC LLJIT as a library of its own, whose
resource tracker frees the code when the program is closed or collected. Its undefined symbols
(read from the ELF symbol table) resolve from `add_external`'s table (BLAS, runtime.py's
`tj_rt_*`), then from symbols registered with `llvmlite.binding.add_symbol` (LLJIT does not look
there by itself), then from numba's C helpers and memory manager (`numba_gamma`, `NRT_*`: their
extensions loaded without numba, extensions.py), then from the process (libm, the Python C API).

`cached_bytes` keeps what it builds under `<cache root>/llvm/<folder>/`, one file per key
(`read_cached` and `write_cached` apart: program.py keeps each program's object code in folder
`obj`), sealed with the user's key (disk/trust.py): a file that is not authentic, not the
user's or not a file is built again and replaced; where the directory cannot be used, memory
only (with disk/store.py's one warning). Keys are hashed with the host CPU, its features and the
source of jit.py, library.py and called_kernels.py; the cache root's name holds the tapejit,
numba and llvmlite versions.
"""
from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import hashlib
import itertools
import logging
import os
import re
import struct
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterator

import llvmlite
import llvmlite.binding as llvm
from llvmlite.binding import ffi

from ...config import config
from ...disk import store
from ...disk.trust import Root, read_sealed, write_sealed
from ...errors import TapejitError
from ...extensions import numba_helper

# the llvmlite this generator is written for (opaque pointers, ORC LLJIT, the new pass manager);
# with an older one numba compiles every program (compile.py)
SUPPORTED = tuple(int(p) for p in llvmlite.__version__.split(".")[:2]) >= (0, 50)
LIBRARY = ("lib", "runtime")   # cached_bytes folders of library code (TAPEJIT_LIBRARY_DIR)
# exported definitions start so, every other one is internal (lower.py: the modules apart)
ENTRY, NEST, PART = "tj_entry", "tj_nest", "tj_part_"
KERNEL = "tj_lib_"            # library kernels, linked in from their bitcode
_log = logging.getLogger("tapejit")
_VARIANT_ATTRIBUTE = re.compile(r'"vector-function-abi-variant"="([^"]*)"')
_VARIANT = re.compile(r"_(tj_lib_\w+)\((\w+)\)")      # scalar, vector in a VFABI name
_KERNEL_USE = re.compile(r"@(tj_lib_\w+)\(")
_KERNEL_REF = re.compile(r"@(tj_lib_\w+)\b")
_kernels: dict[str, bytes] = {}                 # symbol -> bitcode (library.py adds them)
_sizes: dict[str, int] = {}       # symbol -> instructions, of kernels also loaded to be called
INLINE_BUDGET = 1000              # instructions of such kernels a module inlines (_inlined)
_externals: dict[str, Callable[[], int]] = {}   # symbol -> its address, found on first use
_local = threading.local()
_lock = threading.Lock()
_names = itertools.count()
_lljit: llvm.LLJIT | None = None


class NotBuilt(Exception):
    """Library code that is neither loaded nor on disk, asked for where nothing may be built
    (`no_builds`)."""


_may_build = contextvars.ContextVar("tapejit_llvm_may_build", default=True)


@contextlib.contextmanager
def no_builds() -> Iterator[None]:
    """Within: `cached_bytes` raises NotBuilt rather than build library code (kernels numba
    would compile): the first-call tier asks whether a program is ready without the wait."""
    token = _may_build.set(False)
    try:
        yield
    finally:
        _may_build.reset(token)


class JitError(TapejitError, RuntimeError):
    """LLVM refused a module, or a program's code could not be linked into the process."""


def add_kernel(symbol: str, bitcode: bytes, size: int | None = None) -> None:
    """Make `compile_object` link `bitcode` (defining `symbol`) into modules declaring it;
    `size`: its instructions, where `symbol` is also loaded (`add_external`) to be called: a
    module then inlines it within INLINE_BUDGET only (`_inlined`)."""
    _kernels[symbol] = bitcode
    if size is not None:
        _sizes[symbol] = size


def add_external(symbol: str, address: Callable[[], int]) -> None:
    """Resolve `symbol` in loaded programs to `address()` (called once, on first use)."""
    _externals[symbol] = functools.cache(address)


def by_address(symbol: str) -> bool:
    """Whether programs call `symbol` by address (`add_external`), not linking it in."""
    return symbol in _externals


@functools.cache
def host() -> tuple[str, str]:
    """The CPU name and features code is compiled for (numba's environment overrides)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.set_option("tapejit", "-force-ordered-reductions=true")
    name = os.environ.get("NUMBA_CPU_NAME") or llvm.get_host_cpu_name()
    features = os.environ.get("NUMBA_CPU_FEATURES")
    return name, features if features is not None else llvm.get_host_cpu_features().flatten()


def target_machine(cheap: bool = False) -> llvm.TargetMachine:
    """This thread's target machine for the host (LLVM's are not shared across threads); the
    large code model (32-bit offsets aborted LLVM where libtorch's mappings split a program).
    `cheap`: LLVM's fast instruction selection and register allocation (`compile_object`)."""
    attribute = "cheap_tm" if cheap else "tm"
    tm = getattr(_local, attribute, None)
    if tm is None:
        name, features = host()
        tm = llvm.Target.from_default_triple().create_target_machine(
            cpu=name, features=features, opt=0 if cheap else 3, reloc="static", codemodel="large")
        setattr(_local, attribute, tm)
    return tm


def parse(ir: str, context: llvm.context.ContextRef) -> llvm.ModuleRef:
    """The module of IR text `ir`, verified; raises JitError naming LLVM's complaint."""
    try:
        module = llvm.parse_assembly(ir, context)
        module.verify()
    except RuntimeError as err:
        raise JitError(f"LLVM rejects the generated module: {err}") from None
    return module


def optimise(module: llvm.ModuleRef, cheap: bool = False) -> None:
    """Run numba's O3 pipeline on `module`: loop vectoriser on, SLP vectoriser off, no loop
    interleaving (the peers' MLP, LJ, GMM: compile 15-19% faster, run times the same);
    `cheap`: O1, no vectoriser."""
    tuning = llvm.create_pipeline_tuning_options(speed_level=1 if cheap else 3)
    tuning.loop_vectorization, tuning.slp_vectorization = not cheap, False
    tuning.loop_interleaving = False
    builder = llvm.create_pass_builder(target_machine(), tuning)
    _unlocked("LLVMPY_RunNewModulePassManager")(builder.getModulePassManager(), module, builder)


def _unlocked(name: str) -> Callable[..., Any]:
    """llvmlite's C function `name` without llvmlite's process-wide lock, which it takes
    around every call: that lock made the parts of a program compile one after the other on
    the threads meant to compile them at once. Used for the calls that do the work (the
    passes, code generation) on objects of the calling thread alone: its own context, module,
    target machine and pass builder, which LLVM lets threads use at the same time."""
    return getattr(ffi.lib, name)._cfn


def numba_export(numba_ir: str, wrapper: str, exports: tuple[str, ...],
                 inline: str | None = None) -> llvm.ModuleRef:
    """numba's module of a function with `wrapper` (IR text defining `exports`, its C entries)
    linked in; everything else internal and what they do not use dropped. `inline`: numba's
    function to inline into the wrapper (a kernel's code, one function to optimise)."""
    context = llvm.create_context()
    module = parse(numba_ir, context)
    module.link_in(parse(wrapper, context))
    if inline is not None:
        module.get_function(inline).add_function_attribute("alwaysinline")
    for value in (*module.functions, *module.global_variables):
        if not value.is_declaration and value.name not in exports:
            value.linkage = llvm.Linkage.internal
    passes = llvm.create_new_module_pass_manager()
    if inline is not None:
        passes.add_always_inliner_pass()
    passes.add_global_dead_code_eliminate_pass()
    passes.add_strip_dead_prototype_pass()
    tuning = llvm.create_pipeline_tuning_options(speed_level=0)
    passes.run(module, llvm.create_pass_builder(target_machine(), tuning))
    return module


def compile_object(ir: str, inline: bool = True, cheap: bool = False) -> bytes:
    """Object code of IR text `ir` with its kernels linked in (the module docstring);
    `inline=False`: the kernels loaded to be called are all called (the quick tier,
    `inlines`); `cheap`: LLVM's cheapest code worth running, O1 and fast code generation, for
    the same bits (no fast-math anywhere) in a third of the time (HIPS hmm_em's 20,000-line
    module: 0.58 s against 1.60)."""
    start = time.perf_counter()
    module = _optimised(ir, inline, cheap)
    emitting = time.perf_counter()
    obj = _emit_object(module, cheap)
    _log.debug("llvm: module compiled in %.1f ms (code generation %.1f ms)",
               1e3 * (time.perf_counter() - start), 1e3 * (time.perf_counter() - emitting))
    return obj


def _emit_object(module: llvm.ModuleRef, cheap: bool = False) -> bytes:
    """`target_machine(cheap).emit_object(module)`, unlocked (`_unlocked`)."""
    with ffi.OutputString() as error:
        buffer = _unlocked("LLVMPY_TargetMachineEmitToMemory")(target_machine(cheap), module,
                                                               1, error)
        if not buffer:
            raise JitError(f"LLVM could not emit object code: {error}")
    try:
        return ctypes.string_at(ffi.lib.LLVMPY_GetBufferStart(buffer),
                                ffi.lib.LLVMPY_GetBufferSize(buffer))
    finally:
        ffi.lib.LLVMPY_DisposeMemoryBuffer(buffer)


def assembly(ir: str) -> str:
    """The host assembly `compile_object` makes of `ir` (to read: loops vectorised?)."""
    return target_machine().emit_assembly(_optimised(ir))


def _optimised(ir: str, inline: bool = True, cheap: bool = False) -> llvm.ModuleRef:
    """`ir` parsed, its kernels linked in, all but the entry points internal, optimised."""
    start = time.perf_counter()
    tm, context = target_machine(), llvm.create_context()
    used = {s for s, n in Counter(_KERNEL_REF.findall(ir)).items() if n > 1}  # not declared only
    inlined = _inlined(ir) if inline else set()
    module = parse(_variants_kept(ir, used - inlined), context)
    module.triple, module.data_layout = tm.triple, str(tm.target_data)
    for symbol in sorted(s for s in used if s not in _externals or s in inlined):
        module.link_in(_kernel_module(symbol, context))            # the others: by address
    for value in (*module.functions, *module.global_variables):
        if not value.is_declaration and not value.name.startswith((ENTRY, NEST, PART, "llvm.")):
            value.linkage = llvm.Linkage.internal
    parsed = time.perf_counter()
    optimise(module, cheap)
    _log.debug("llvm: module parsed and linked in %.1f ms, optimised in %.1f ms",
               1e3 * (parsed - start), 1e3 * (time.perf_counter() - parsed))
    return module


def inlines(ir: str) -> bool:
    """Whether `compile_object(ir)` inlines a kernel that `compile_object(ir, inline=False)`
    calls: then the quick tier is worth compiling first (program.py). bench/peers.py's
    elementwise gradient: LLVM works 57 ms inlining sin, cos, exp and tanh, 12 ms calling
    them; its calls take 14 ms against 21 on one thread."""
    return bool(_inlined(ir))


def _inlined(ir: str) -> set[str]:
    """The kernels loaded to be called that `ir` inlines all the same: the cheapest first
    (instructions times call sites) while the total stays within INLINE_BUDGET. Inlined code
    costs LLVM about 0.1 ms per instruction (sin: 17 ms a place; 12 calls of it compile in
    9 ms), but a program calling sin and cos of the same values computes their common range
    reduction once where both are inlined: bench/peers.py's elementwise gradient (sin, cos,
    exp, tanh: 482 instructions) runs in 12.6 ms inlined, 19.8 ms calling them (LLVM work
    60 ms against 20; busy 2-core machine). A program calling sin at 300 places calls it."""
    sites = Counter(_KERNEL_USE.findall(ir))
    costs = sorted((_sizes[s] * (n - 1), s) for s, n in sites.items() if s in _sizes and n > 1)
    chosen, spent = set(), 0
    for cost, symbol in costs:             # (n - 1: one of the uses is the declaration)
        spent += cost
        if spent > INLINE_BUDGET:
            break
        chosen.add(symbol)
    return chosen


def _variants_kept(ir: str, called: set[str]) -> str:
    """`ir` with the vector variants of the `called` kernels that its
    "vector-function-abi-variant" attributes name in @llvm.compiler.used: the vectoriser calls
    declared variants only, and LLVM drops unused declarations before it runs."""
    names = sorted({name for mapping in _VARIANT_ATTRIBUTE.findall(ir)
                    for scalar, name in _VARIANT.findall(mapping) if scalar in called})
    if not names:
        return ir
    used = ", ".join(f"ptr @{name}" for name in names)
    return (f"{ir}\n@llvm.compiler.used = appending global [{len(names)} x ptr] [{used}], "
            'section "llvm.metadata"\n')


def _kernel_module(symbol: str, context: llvm.context.ContextRef) -> llvm.ModuleRef:
    bitcode = _kernels.get(symbol)
    if bitcode is None:
        raise JitError(f"the module declares {symbol}, which is no kernel of this process "
                       f"(library.py makes them: ask it for the kernel before compiling)")
    kernel = llvm.parse_bitcode(bitcode, context)
    tm = target_machine()
    kernel.triple, kernel.data_layout = tm.triple, str(tm.target_data)
    return kernel


def _jit() -> llvm.LLJIT:
    """The process's LLJIT (every Program holds it: its code must not outlive it)."""
    global _lljit
    with _lock:
        if _lljit is None:
            host()                      # LLVM's native target, initialised
            _lljit = llvm.create_lljit_compiler()   # it links object code only: no compiler
        return _lljit


class Program:
    """Object code loaded into this process; `address(name)` of each export; `close()` frees
    the code (so does garbage collection), after which no address may be called."""

    def __init__(self, obj: bytes | list[bytes], exports: tuple[str, ...]) -> None:
        """`obj`: one object file, or several that call each other (one library)."""
        start = time.perf_counter()
        objs = [obj] if isinstance(obj, bytes) else obj
        builder = llvm.JITLibraryBuilder()
        for o in objs:
            builder.add_object_img(o)
        own = {s for o in objs for s in defined_symbols(o)}
        for symbol in sorted({s for o in objs for s in undefined_symbols(o)} - own):
            builder.import_symbol(symbol, _address(symbol))
        for symbol in exports:
            builder.export_symbol(symbol)
        self.name, self._jit = f"tj_program_{next(_names)}", _jit()
        try:
            self._tracker: llvm.ResourceTracker | None = builder.link(self._jit, self.name)
        except RuntimeError as err:
            raise JitError(f"LLVM could not load {self.name}'s object code: {err}") from None
        self.exports = exports
        _log.debug("llvm: %s loaded in %.2f ms", self.name, 1e3 * (time.perf_counter() - start))

    def address(self, name: str) -> int:
        if self._tracker is None:
            raise JitError(f"{name} belongs to a closed program: its code is freed")
        if name not in self.exports:
            raise JitError(f"{self.name} exports {self.exports}, not {name}")
        return self._tracker[name]

    def close(self) -> None:
        tracker, self._tracker = self._tracker, None
        if tracker is not None:
            tracker.close()


def _address(symbol: str) -> int:
    """Where `symbol` is in this process (the module docstring's order); raises JitError."""
    if symbol in _externals:
        return _externals[symbol]()
    address = llvm.address_of_symbol(symbol) or numba_helper(symbol)
    if not address:
        try:
            address = ctypes.cast(_process()[symbol], ctypes.c_void_p).value
        except AttributeError:
            raise JitError(f"generated code calls {symbol}, which is not defined in this "
                           f"process (runtime.py and library.py register tapejit's own: is "
                           f"the module one of theirs?)") from None
    return address


@functools.cache
def _process() -> ctypes.CDLL:
    return ctypes.CDLL(None)


def undefined_symbols(obj: bytes) -> list[str]:
    """The names an ELF64 little-endian object file uses but does not define."""
    return _symbols(obj, defined=False)


def defined_symbols(obj: bytes) -> list[str]:
    """The global names an ELF64 little-endian object file defines."""
    return _symbols(obj, defined=True)


def _symbols(obj: bytes, defined: bool) -> list[str]:
    if obj[:6] != b"\x7fELF\x02\x01":
        raise JitError("tapejit's llvm generator loads 64-bit little-endian ELF object code "
                       "only (Linux on x86-64 or AArch64)")
    shoff, = struct.unpack_from("<Q", obj, 0x28)
    size, count = struct.unpack_from("<HH", obj, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", obj, shoff + i * size) for i in range(count)]
    found = []
    for _, kind, _, _, offset, length, link, _, _, entsize in sections:
        if kind != 2:                       # SHT_SYMTAB
            continue
        strings = sections[link][4]
        for at in range(offset + entsize, offset + length, entsize):
            name, info, _, index = struct.unpack_from("<IBBH", obj, at)
            # SHN_UNDEF, or a global or weak binding defined in a section
            if name and (index != 0 and info >> 4 in (1, 2) if defined else index == 0):
                found.append(obj[strings + name:obj.index(b"\0", strings + name)].decode())
    return found


@functools.cache
def _stamp() -> bytes:
    """What object code and kernels depend on besides the versions in the cache root's name."""
    h = hashlib.sha256("\0".join((*host(), llvmlite.__version__)).encode())
    for source in (Path(__file__), *(Path(__file__).with_name(f"{name}.py")
                                      for name in ("library", "called_kernels"))):
        h.update(source.read_bytes())
    return h.digest()


def cached_bytes(folder: str, key: str, build: Callable[[], bytes]) -> tuple[bytes, bool]:
    """(what `build()` makes for `key`, whether it came from disk): read from
    `<cache root>/llvm/<folder>/` where a sealed file holds it, else built and written there."""
    payload = read_cached(folder, key)
    if payload is not None:
        return payload, True
    if folder in LIBRARY and not _may_build.get():
        raise NotBuilt(f"{folder}/{_name(key)}")
    payload = build()
    write_cached(folder, key, payload)
    return payload, False


def read_cached(folder: str, key: str) -> bytes | None:
    """What `<cache root>/llvm/<folder>/` holds for `key`: None where no authentic file of the
    user's does (or the directory cannot be used)."""
    try:
        return read_sealed(_root(folder), _name(key))
    except OSError:
        return None


def write_cached(folder: str, key: str, payload: bytes) -> None:
    """Keep `payload` for `key` (sealed); memory only, with disk/store.py's one warning, where the
    directory cannot be used."""
    try:
        root = _root(folder)
    except OSError as err:
        store.warn_memory_only(config().cache_dir, err)
        return
    try:
        write_sealed(root, _name(key), payload)
    except OSError as err:
        store.warn_memory_only(root.path, err)


def _root(folder: str) -> Root:
    return (store.library_dir if folder in LIBRARY else store.sealed_dir)("llvm", folder)


def _name(key: str) -> str:
    return hashlib.sha256(_stamp() + key.encode()).hexdigest()[:40]
