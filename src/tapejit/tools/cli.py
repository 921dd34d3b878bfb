"""The command line: `python -m tapejit` or `tapejit`.

    tapejit demo [--quick] [--epochs N]     train an MLP on scikit-learn's digits (demo.py)
    tapejit info                            versions, backends, CUDA, the cache directory
    tapejit cache list | clear              the compiled programs on disk
    tapejit bench [peers|compiler] [--checkout DIR] [...]
                                            run a benchmark suite of a source checkout
    tapejit selfcheck [--programs N] [--seed S]
                                            random programs compiled == interpreted == numpy

Each subcommand is a function `(args) -> exit status`; `main(argv)` dispatches.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Sequence

SUITES = {"peers": "peers.py", "compiler": "run_all.py"}   # scripts of a checkout's bench/
INSTALLED_FROM = Path(__file__).resolve().parents[3]      # the checkout of `pip install -e .`


def checkout(given: str | None) -> Path | None:
    """The source checkout whose bench/ `tapejit bench` runs: `--checkout DIR`, else the one
    this tapejit is installed from (an editable install), else the current directory; None
    where none holds the suites (a wheel install ships no bench/)."""
    candidates = [Path(given)] if given else [INSTALLED_FROM, Path.cwd()]
    return next((c for c in candidates
                 if all((c / "bench" / s).is_file() for s in SUITES.values())), None)


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    raise AssertionError


def _in_child(code: str) -> subprocess.CompletedProcess | str:
    """Run `code` in a child Python (importing numba.cuda can be slow or fail): the finished
    process, or why it could not run."""
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"unknown ({err})"


def _cuda() -> str:
    """Whether numba sees a CUDA GPU."""
    proc = _in_child("from numba import cuda; print(cuda.is_available())")
    if isinstance(proc, str):
        return proc
    if proc.returncode:
        return f"no (numba.cuda: {proc.stderr.strip().splitlines()[-1][:80]})"
    return "yes" if proc.stdout.strip() == "True" else "no GPU or driver found"


def _cuda_backend() -> str:
    """Whether backend="cuda" can run, and on what."""
    proc = _in_child("from tapejit.cuda_support import cuda_status; print(cuda_status())")
    if isinstance(proc, str):
        return proc
    return proc.stdout.strip() or proc.stderr.strip().splitlines()[-1][:120]


AVX512 = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}   # OpenBLAS's SkylakeX


def _blas() -> list[str]:
    """The OpenBLAS builds loaded for matrix products (numpy's; scipy's, which numba's np.dot
    and so tapejit's programs call) and the kernels each runs. Where they are AVX2 kernels on
    a CPU with AVX-512 (chosen by OPENBLAS_CORETYPE, or a CPU OpenBLAS does not know), say
    how to get the AVX-512 ones: about 1.5x faster products (bench/README.md)."""
    import ctypes
    try:
        import scipy.linalg.cython_blas  # noqa: F401  (loads scipy's OpenBLAS)
        with open("/proc/self/maps") as maps, open("/proc/cpuinfo") as cpu:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line})
            flags = next((set(line.split()) for line in cpu if line.startswith("flags")), set())
    except (ImportError, OSError):
        return []
    chosen = os.environ.get("OPENBLAS_CORETYPE")
    lines = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:          # e.g. a mapping of a file since deleted
            continue
        name = next((getattr(lib, n) for n in ("scipy_openblas_get_corename64_",
                                               "scipy_openblas_get_corename",
                                               "openblas_get_corename") if hasattr(lib, n)), None)
        if name is None:
            continue
        name.restype = ctypes.c_char_p
        core = name().decode()
        note = f" (OPENBLAS_CORETYPE={chosen})" if chosen else ""
        if AVX512 <= flags and core.lower() in ("haswell", "zen", "sandybridge", "prescott"):
            note += "; this CPU has AVX-512: OPENBLAS_CORETYPE=SkylakeX runs its AVX-512 kernels"
        lines.append(f"{Path(path).name}: {core} kernels{note}")
    return lines


def _threads() -> str:
    """tapejit's thread budget and what it was decided from (threads.py)."""
    from .. import threads
    from ..codegen.blas import GRAIN
    given = threads.inputs()
    return (f"{threads.decide(**given)} from " +
            ", ".join(f"{k}={'-' if v is None else v}" for k, v in given.items()) +
            f"; a matrix product takes one per {GRAIN:,} multiply-adds")


def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo
    demo.main(args.rest)
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    import tapejit as tj
    from ..disk import store
    from ..backends import BACKENDS
    from ..config import config
    settings = config()
    print(f"tapejit {tj.__version__} ({Path(tj.__file__).parent})")
    print(f"python {platform.python_version()} ({sys.executable}), {platform.platform()}")
    for dist in ("numpy", "numba", "llvmlite", "scipy", "scikit-learn"):
        print(f"{dist} {_version(dist)}")
    print(f"backends: {', '.join(BACKENDS)}; default {settings.backend}"
          + (" (TAPEJIT_DISABLE_JIT=1: interpret)" if settings.disable_jit else ""))
    print(f"first call of a new numba program: {settings.first_call} (TAPEJIT_FIRST_CALL)")
    print(f"threads: {_threads()}")
    for line in _blas():
        print(f"BLAS: {line}")
    print(f"CUDA: {_cuda()}")
    print(f"backend \"cuda\": {_cuda_backend()}")
    try:
        root, entries = store.cache_root(), store.cache_entries()
    except OSError as err:
        print(f"cache directory: {settings.cache_dir} (TAPEJIT_CACHE_DIR): not used, programs "
              f"compile in memory only ({type(err).__name__}: {err})")
        return 0
    total = sum(f.stat().st_size for f in settings.cache_dir.rglob("*") if f.is_file())
    print(f"cache directory: {settings.cache_dir} (TAPEJIT_CACHE_DIR), {_size(total)} in all")
    print(f"  this version: {root}: {len(entries)} programs, "
          f"{_size(sum(e.size for e in entries))}")
    return 0


def cmd_cache(args: argparse.Namespace) -> int:
    from ..disk import store
    try:
        root = store.cache_root()
    except OSError as err:
        print(f"tapejit does not use the cache directory: {type(err).__name__}: {err}",
              file=sys.stderr)
        return 1
    if args.action == "clear":
        print(f"removed {store.clear_cache()} programs from {root}")
        return 0
    entries = store.cache_entries()
    print(f"{root}: {len(entries)} programs")
    for e in entries:
        when = datetime.datetime.fromtimestamp(e.mtime).strftime("%Y-%m-%d %H:%M")
        print(f"  {e.hash}  {_size(e.size):>9}  {when}" + ("" if e.valid else "  (damaged)"))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    root = checkout(args.checkout)
    if root is None:
        looked = args.checkout or f"{INSTALLED_FROM} (where tapejit is installed) or {Path.cwd()}"
        print(f"tapejit bench runs the benchmark suites of a source checkout (its bench/ "
              f"folder: {', '.join(SUITES.values())}); {looked} has none. Clone the "
              f"repository, pip install -e . there and run it from there, or pass "
              f"--checkout DIR", file=sys.stderr)
        return 2
    bench = root / "bench"
    script = bench / SUITES[args.suite]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(bench), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    return subprocess.run([sys.executable, str(script), *args.rest], env=env).returncode


def cmd_selfcheck(args: argparse.Namespace) -> int:
    """Check random programs; exit status 1 on any wrong value or crash."""
    from . import selfcheck

    def progress(i: int, report: selfcheck.Report) -> None:
        if (i + 1) % args.every == 0 or i + 1 == args.programs:
            print(f"  {i + 1}/{args.programs}: {report.mismatches} mismatches, "
                  f"{report.crashes} crashes, {report.unsupported} unsupported "
                  f"({report.seconds:.0f} s)", flush=True)

    print(f"tapejit selfcheck: {args.programs} programs from seed {args.seed}", flush=True)
    report = selfcheck.run(args.programs, args.seed, structures=args.structures,
                           shrinking=not args.no_shrink, progress=progress)
    for failure in report.failures:
        print(f"\n{failure.text()}")
    print(f"\n{report.summary()}")
    return 0 if report.ok else 1


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tapejit", description="tapejit's command line")
    sub = p.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train an MLP on scikit-learn's digits",
                          add_help=False)
    demo.set_defaults(run=cmd_demo)
    sub.add_parser("info", help="versions, backends, CUDA, cache").set_defaults(run=cmd_info)
    cache = sub.add_parser("cache", help="list or clear the compiled programs on disk")
    cache.add_argument("action", choices=("list", "clear"))
    cache.set_defaults(run=cmd_cache)
    bench = sub.add_parser("bench", help="run a benchmark suite and print its table "
                                         "(peers: bench/peers.py; compiler: bench/run_all.py)")
    bench.add_argument("suite", nargs="?", choices=tuple(SUITES), default="peers")
    bench.add_argument("--checkout", metavar="DIR", default=None,
                       help="the source checkout whose bench/ to run (default: the one "
                            "tapejit is installed from, else the current directory)")
    bench.set_defaults(run=cmd_bench)
    check = sub.add_parser("selfcheck", help="run random numpy programs compiled, interpreted "
                                             "and on numpy, which must agree")
    check.add_argument("--programs", type=int, default=100, help="how many (default 100)")
    check.add_argument("--seed", type=int, default=0, help="the run's seed (default 0)")
    check.add_argument("--structures", type=int, default=None,
                       help="reuse this many programs' statements, with new lengths and values")
    check.add_argument("--no-shrink", action="store_true",
                       help="report failing programs as generated, not shrunk")
    check.add_argument("--every", type=int, default=10, help="a progress line every N programs")
    check.set_defaults(run=cmd_selfcheck)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run one subcommand; its arguments after the subcommand's own go to the script."""
    args, rest = parser().parse_known_args(argv)
    if rest and args.command not in ("demo", "bench"):
        parser().error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest
    return args.run(args)
