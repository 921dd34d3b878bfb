"""Settings read from the environment, once (tests call `reload()` after changing it).

- `TAPEJIT_CACHE_DIR`: where compiled programs live (default `$XDG_CACHE_HOME/tapejit`,
  else `~/.cache/tapejit`).
- `TAPEJIT_BACKEND`: the backend of transforms not given one: "numba" (the default) or
  "interpret".
- `TAPEJIT_DISABLE_JIT=1`: run everything on the numpy interpreter.
- `TAPEJIT_FIRST_CALL=compile`: a new numba program compiles on its first call. By default
  ("interpret") a new program's first calls run on the numpy interpreter, as many as the
  compile would about pay for, and the call after them compiles it (transforms/first_call.py
  `interpreted_calls`): a script that needs one gradient never waits for a compile.
- `TAPEJIT_VERIFY=1`: every call of a compiled program is checked against the numpy
  interpreter (compile.py `verify`): a debugging aid, and how the test suite runs.
- `TAPEJIT_FAST_MATH=0`: generated loops call libm for exp, log, sin, ... instead of tapejit's
  vectorisable kernels (codegen/vmath.py; on by default, within 1.5 ulp of the exact result).
- `TAPEJIT_PARALLEL_MIN_SIZE=n`: a fused loop nest of at least n elements (default 131072)
  runs its outermost loop on threads (numba.prange; codegen/cpu.py); 0 keeps every loop
  serial. bench/parallel.py measures where threads pay: on 2 idle cores from 4096 elements on
  (0.5x at 131072); on cores other jobs keep busy they cost up to 2x (docs/performance.md).
- `TAPEJIT_NUM_THREADS=n`: how many threads compiled programs use, whatever the load (default:
  numba's, the cores, unless the affinity mask, `OMP_NUM_THREADS`, the BLAS limit or other
  processes' running tasks say fewer; threads.py).
- `TAPEJIT_REROLL=0`: plain Python loops stay unrolled. By default the repeated steps of a
  loop in a traced tape become one scan before differentiation (control/reroll.py), so an
  unrolled loop compiles and differentiates like `tj.fori_loop`.
- `TAPEJIT_LOG=info`: the `tapejit` logger reports each compile and its time on stderr
  ("debug" too; "off" silences it). By default only a compile still running after a
  second is announced, at warning level (transforms/first_call.py).
- `TAPEJIT_CUDA_PRODUCTS=auto|cublas|kernel`: how the CUDA backend computes float matrix
  products: cuBLAS (through nvmath-python) or its own tiled kernels; "auto" (the default)
  takes cuBLAS where nvmath-python is installed on a GPU (cuda_support.py `products`).
- `TAPEJIT_CUDA_TF32=1`: cuBLAS may compute float32 products on TF32 tensor cores (10-bit
  mantissas: faster, less exact); by default they are computed in full float32.
- `TAPEJIT_BOUNDSCHECK=0`: generated code does not check traced indices (on by default: an
  index out of range raises IndexError). Off, such an index reads or writes outside its array:
  a wrong result or a crash. The source differs, so the two kinds of program never mix.
- `TAPEJIT_CODEGEN=llvm|numba`: how the numba backend makes machine code. "llvm" (the
  default): tapejit lowers the program to LLVM IR itself (codegen/llvm/) and compiles it in
  milliseconds, falling back to numba for what it does not cover; "numba": numba compiles
  every program (the reference).
- `TAPEJIT_LIBRARY_DIR=dir`: where the LLVM lowering's library (its kernels, compiled by numba
  once per machine, and its runtime) is kept, so that several cache directories share it
  (default: inside `TAPEJIT_CACHE_DIR`); checked and sealed like the cache.
- `TAPEJIT_STRICT=1`: JAX's rule: a Python `if`, `int()`, `float()` or index on a traced value
  is an error (tj.ConcretizationError). By default the value is computed from the call being
  traced and the program is guarded on it: a call giving another value traces again (a new
  variant; transforms/traced.py `_evaluator`, transforms/variants.py).
- `TAPEJIT_DUMP=dir`: every program the numba backend compiles writes its tape, fusion groups
  and generated source to `dir/tj_<program hash>.txt` (explain.py; unset or empty: off).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class Config(NamedTuple):
    """The settings read from the environment (the module docstring lists its variables)."""
    cache_dir: Path
    disable_jit: bool = False
    backend: str = "numba"
    first_call: str = "interpret"
    dump_dir: Path | None = None
    parallel_min_size: int = 131072
    num_threads: int | None = None
    fast_math: bool = True
    omp_threads: int | None = None
    verify: bool = False
    reroll: bool = True
    log: str = "warning"
    cuda_products: str = "auto"
    cuda_tf32: bool = False
    boundscheck: bool = True
    codegen: str = "llvm"
    library_dir: Path | None = None
    strict: bool = False

    def building(self) -> Config:
        """These settings less those that cannot change what a build stage makes (when a
        program compiles, what is logged, whether calls are checked): what the disk memos
        are keyed by, so that a program compiled under TAPEJIT_FIRST_CALL=compile loads in a
        process with the default."""
        return self._replace(first_call="", log="", verify=False)


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in _TRUE


def _count(name: str, default: int | None) -> int | None:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"{name}={text!r}: expected a whole number >= 0")
    return value


def _choice(name: str, choices: tuple[str, ...]) -> str:
    """One of `choices` (the first is the default)."""
    text = os.environ.get(name, "").strip().lower() or choices[0]
    if text not in choices:
        raise ValueError(f"{name}={text!r}: expected one of {', '.join(choices)}")
    return text


def _omp_threads() -> int | None:
    """OMP_NUM_THREADS's first level (it may list one per nesting level, "4,2")."""
    text = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(text) if text.isdigit() and int(text) > 0 else None


def _default_cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tapejit"


def _read() -> Config:
    cache = os.environ.get("TAPEJIT_CACHE_DIR")
    dump = os.environ.get("TAPEJIT_DUMP", "").strip()
    library = os.environ.get("TAPEJIT_LIBRARY_DIR", "").strip()
    return Config(
        cache_dir=Path(cache).expanduser() if cache else _default_cache_dir(),
        disable_jit=_flag("TAPEJIT_DISABLE_JIT"),
        backend=os.environ.get("TAPEJIT_BACKEND", "numba").strip() or "numba",
        first_call=_choice("TAPEJIT_FIRST_CALL", ("interpret", "compile")),
        dump_dir=Path(dump).expanduser() if dump else None,
        parallel_min_size=_count("TAPEJIT_PARALLEL_MIN_SIZE", 131072),
        num_threads=_count("TAPEJIT_NUM_THREADS", None),
        fast_math=os.environ.get("TAPEJIT_FAST_MATH", "1").strip().lower() not in _FALSE,
        omp_threads=_omp_threads(),
        verify=_flag("TAPEJIT_VERIFY"),
        reroll=os.environ.get("TAPEJIT_REROLL", "1").strip().lower() not in _FALSE,
        log=_choice("TAPEJIT_LOG", ("warning", "info", "debug", "off")),
        cuda_products=_choice("TAPEJIT_CUDA_PRODUCTS", ("auto", "cublas", "kernel")),
        cuda_tf32=_flag("TAPEJIT_CUDA_TF32"),
        boundscheck=os.environ.get("TAPEJIT_BOUNDSCHECK", "1").strip().lower() not in _FALSE,
        codegen=_choice("TAPEJIT_CODEGEN", ("llvm", "numba")),
        strict=_flag("TAPEJIT_STRICT"),
        library_dir=Path(library).expanduser() if library else None,
    )


_current: Config | None = None


def config() -> Config:
    """The settings, read from the environment on first use."""
    return _current if _current is not None else reload()


def reload() -> Config:
    """Re-read the environment (for tests and long-lived processes)."""
    global _current
    _current = _read()
    return _current
