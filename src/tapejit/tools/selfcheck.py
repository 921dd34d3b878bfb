"""`tapejit selfcheck`: random numpy programs (program_generator.py) run compiled (from the
first call, whatever TAPEJIT_FIRST_CALL says), interpreted and on numpy, which must agree.

For each program, on arguments whose axes often have equal lengths by coincidence:

- `tj.jit(f)` on the numba backend and on the interpreter equal numpy on calls 1, 2 and 3
  (new values each call: the first compiles, the next two reuse the compiled program);
- for a program with a float scalar result, `tj.grad(f)` compiled equals interpreted on the
  same calls, and the interpreted gradient matches central finite differences of numpy's
  `f` along a random direction (skipped at a kink: where the one-sided differences differ);
- twice more with new lengths for the axes (a new batch): compiled equals numpy too;
- a program may branch with a Python `if` or `int()` on a traced value, or slice, index or
  scale with a Python int parameter (drawn anew each call): every call takes its own branch
  (a guarded variant), and must still equal numpy (the report counts the variants);
- for a program with index parameters, once with one index out of its axis: where numpy
  raises IndexError, jit and grad raise `tj.IndexOutOfBoundsError` on the interpreter, on
  the compiled program (a later call) and on a new transform's first call.

    report = run(programs=200, seed=0)
    print(report.summary()); report.failures[0].text()

The report counts the compiled programs tapejit's LLVM lowering made (codegen/llvm/) and
those numba compiled because the lowering does not cover them. A tapejit error for a program
numpy runs counts as *unsupported*; any other exception, a compile that falls back to the
interpreter, or a wrong value counts as a failure. A failing program is shrunk to the
shortest prefix of it (its dead statements removed) that still fails.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import time
import warnings
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from ..config import reload
from ..errors import IndexOutOfBoundsError, TapejitError, TapejitWarning
from .statement_templates import Builder
from .program_generator import NEW_SIZES, RandomProgram, bases, size_of

CALLS = 3           # calls with the first lengths, then 2 with new ones
RTOL = 1e-6         # compiled against numpy / the interpreter
FD_STEP = 1e-6
FD_RTOL = 1e-5      # the interpreted gradient against finite differences
KINK_RTOL = 1e-3    # one-sided differences further apart than this: a kink, not checked
GUARDED = 0.3       # the share of programs that end with a guarded statement


def generate(seed: int | np.random.SeedSequence, statements: int | None = None) -> RandomProgram:
    """A random program from `seed`: 1-3 float parameters and 1-6 statements, then in
    `GUARDED` of them one that a guard decides (statement_templates' `Builder.guarded`)."""
    rng = np.random.default_rng(seed)
    builder = Builder(rng)
    for _ in range(int(rng.integers(1, 4))):
        builder.float_arg()
    for _ in range(statements or int(rng.integers(1, 7))):
        builder.statement()
    if rng.random() < 0.7:
        builder.join()
    scalar = bool(rng.random() < 0.7)
    guards = rng.spawn(1)[0]
    if guards.random() < GUARDED:
        builder.guarded(guards)
    return builder.program(scalar=scalar)


class Mismatch(AssertionError):
    """Two runs that must agree do not."""


class Unsupported(Exception):
    """tapejit refused a program numpy runs."""


@dataclasses.dataclass
class Failure:
    """One program that failed: what went wrong where, and the program itself."""

    kind: str           # "mismatch", "crash" or "unsupported"
    index: int          # the program's number in the run
    stage: str          # e.g. "jit numba, call 2"
    message: str
    source: str
    shapes: str

    def text(self) -> str:
        return (f"[{self.kind}] program {self.index}, {self.stage}: {self.message}\n"
                f"# arguments: {self.shapes}\n{self.source}")


@dataclasses.dataclass
class Report:
    """Counts of a run, and its failures (unsupported programs included)."""

    programs: int = 0
    passed: int = 0
    mismatches: int = 0
    crashes: int = 0
    unsupported: int = 0
    gradients: int = 0          # programs whose gradient was checked
    out_of_range: int = 0       # programs run with an index out of range (numpy raising)
    fd_checked: int = 0         # ... against finite differences (not at a kink)
    numba_calls: int = 0        # calls of numba-backend transforms ...
    compiled_calls: int = 0     # ... that ran compiled code (not the first-call interpreter)
    llvm_programs: int = 0      # their compiled programs lowered to LLVM by tapejit ...
    numba_programs: int = 0     # ... and compiled by numba (the lowering did not cover them)
    guarded: int = 0            # of the numba programs, variants chosen by their guards
    seconds: float = 0.0
    failures: list[Failure] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.mismatches == 0 and self.crashes == 0

    def add(self, failure: Failure | None) -> None:
        self.programs += 1
        if failure is None:
            self.passed += 1
            return
        self.failures.append(failure)
        field = {"mismatch": "mismatches", "crash": "crashes"}.get(failure.kind, failure.kind)
        setattr(self, field, getattr(self, field) + 1)

    def summary(self) -> str:
        return (f"{self.programs} programs: {self.passed} passed, {self.mismatches} "
                f"mismatches, {self.crashes} crashes, {self.unsupported} unsupported; "
                f"{self.gradients} gradients checked ({self.fd_checked} against finite "
                f"differences); {self.out_of_range} with an index out of range; "
                f"{self.compiled_calls} of {self.numba_calls} numba calls ran compiled code; "
                f"{self.llvm_programs} programs lowered to LLVM, {self.numba_programs} "
                f"compiled by numba; {self.guarded} guarded variants; {self.seconds:.1f} s")


def compare(got: Any, want: Any, what: str) -> None:
    """`got` must equal `want` (pytrees of arrays) in structure, shape, dtype and value."""
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            raise Mismatch(f"{what}: got {type(got).__name__}, want {len(want)} results")
        for k, (g, w) in enumerate(zip(got, want)):
            compare(g, w, f"{what}[{k}]")
        return
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise Mismatch(f"{what}: got {got.dtype}{list(got.shape)}, "
                       f"want {want.dtype}{list(want.shape)}")
    scale = float(np.max(np.abs(want), initial=1.0))
    if not np.allclose(got, want, rtol=RTOL, atol=RTOL * scale, equal_nan=True):
        worst = np.unravel_index(np.argmax(np.abs(got - want)), got.shape) if got.size else ()
        raise Mismatch(f"{what}: max |difference| {np.max(np.abs(got - want)):.3g} at "
                       f"{tuple(int(i) for i in worst)}\n  got  {_short(got)}\n  want "
                       f"{_short(want)}")


def _short(a: np.ndarray) -> str:
    return np.array2string(a, precision=5, threshold=30).replace("\n", " ")


def finite_differences(fn: Callable[..., Any], args: list[np.ndarray],
                       positions: Sequence[int], grads: Sequence[np.ndarray],
                       rng: np.random.Generator) -> bool:
    """Check the directional derivative `grads . v` against central differences of `fn`
    along a random `v`; False (not checked) where `fn` has a kink there."""
    direction = [rng.standard_normal(args[i].shape) for i in positions]

    def at(step: float) -> float:
        moved = list(args)
        for i, v in zip(positions, direction):
            moved[i] = args[i] + step * v
        return float(fn(*moved))

    low, mid, high = at(-FD_STEP), at(0.0), at(FD_STEP)
    forward, backward = (high - mid) / FD_STEP, (mid - low) / FD_STEP
    if abs(forward - backward) > KINK_RTOL * (1.0 + abs(forward) + abs(backward)):
        return False
    central = (high - low) / (2 * FD_STEP)
    analytic = sum(float(np.sum(g * v)) for g, v in zip(grads, direction))
    if abs(central - analytic) > FD_RTOL * (1.0 + abs(central) + abs(mid)):
        raise Mismatch(f"grad interpret against finite differences: directional derivative "
                       f"{analytic:.8g}, finite differences {central:.8g}")
    return True


class Checker:
    """The checks of one program; `stage` names the one running (for the failure report)."""

    def __init__(self, program: RandomProgram, rng: np.random.Generator) -> None:
        import tapejit as tj
        self.program, self.rng = program, rng
        self.fn = program.function()
        self.stage = "numpy"
        self.jits = {b: tj.jit(self.fn, backend=b) for b in ("interpret", "numba")}
        argnums = program.float_positions
        self.grads = {b: tj.grad(self.fn, argnums=argnums, backend=b)
                      for b in ("interpret", "numba")} if program.scalar else {}
        self.fd_checked = False
        self.out_of_range = False
        self.numba_calls = 0
        self.first: dict = {}       # the lengths of the first calls ...
        self.sizes: dict = {}       # ... and of the calls running

    def call(self, stage: str, fn: Callable[..., Any], args: list[np.ndarray]) -> Any:
        """Run one transform: a tapejit error of the interpreter means unsupported, and a
        compile that fell back to the interpreter is a failure."""
        self.stage = stage
        self.numba_calls += "numba" in stage
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TapejitWarning)
            try:
                out = fn(*args)
            except TapejitError as err:
                if "interpret" in stage:
                    raise Unsupported(f"{type(err).__name__}: {err}") from err
                raise
        for w in caught:
            if "could not compile" in str(w.message):
                raise RuntimeError(f"compile fell back to the interpreter: {w.message}")
        return out

    def compiled(self) -> list[Any]:
        """The numba-backend transforms."""
        return [self.jits["numba"]] + ([self.grads["numba"]] if self.grads else [])

    def interpreted_calls(self) -> int:
        """How many numba-backend calls ran on the interpreter (a new program's first)."""
        return sum(t.cache_info()["interpreted"] for t in self.compiled())

    def programs(self) -> list[Any]:
        """The numba-backend transforms' compiled programs (compile.py's `Compiled`)."""
        return [p.run for t in self.compiled()
                for p in getattr(t, "__wrapped_transform__", t)._cache.values()
                if hasattr(p.run, "codegen")]

    def guarded_variants(self) -> int:
        """How many programs of the numba-backend transforms their guards choose (one per
        branch a Python `if`, `int()` or int argument took)."""
        return sum(p.guarded for t in self.compiled()
                   for p in getattr(t, "__wrapped_transform__", t)._cache.values())

    def check_call(self, label: str, args: list[np.ndarray], first: bool) -> None:
        """jit (and grad) on both backends against numpy for one call."""
        with np.errstate(all="ignore"):
            want = self.fn(*args)
        for backend, jitted in self.jits.items():
            compare(self.call(f"jit {backend}, {label}", jitted, args), want,
                    f"jit {backend} against numpy")
        if not self.grads:
            return
        exact = self.call(f"grad interpret, {label}", self.grads["interpret"], args)
        compare(self.call(f"grad numba, {label}", self.grads["numba"], args), exact,
                "grad numba against grad interpret")
        if first:
            self.stage = f"finite differences, {label}"
            self.fd_checked = finite_differences(self.fn, args, self.program.float_positions,
                                                 exact, self.rng)

    def run(self, sizes: dict | None = None) -> None:
        """Every check, first with `sizes` (default: drawn), then with new ones."""
        self.first = self.sizes = sizes or self.program.draw_sizes(self.rng)
        for k in range(CALLS):
            self.check_call(f"call {k + 1}", self.program.arguments(self.first, self.rng),
                            k == 0)
        self.check_out_of_range()
        if self.program.symbols():
            self.sizes = self.program.draw_sizes(self.rng, unlike=self.first,
                                                 choices=NEW_SIZES)
            for k in range(2):
                self.check_call(f"new lengths, call {k + 1}",
                                self.program.arguments(self.sizes, self.rng), False)


    def check_out_of_range(self) -> None:
        """One entry of an index argument moved out of its axis (past either end, or far):
        where numpy raises IndexError, every transform must raise IndexOutOfBoundsError."""
        import tapejit as tj
        indices = [a for a in self.program.args if a.bound is not None]
        if not indices:
            return
        # lengths giving every index argument an element (two calls compile them, if new)
        kept = {b for a in indices for d in a.dims for b in bases(d)}
        sizes = {sym: max(n, 1) if sym in kept else n for sym, n in self.first.items()}
        self.sizes = sizes
        for k in range(2 if sizes != self.first else 0):
            self.check_call(f"indices not empty, call {k + 1}",
                            self.program.arguments(sizes, self.rng), False)
        args = self.program.arguments(sizes, self.rng)
        k = self.pick([k for k, a in enumerate(self.program.args) if a.bound is not None])
        n = size_of(self.program.args[k].bound, sizes)
        args[k].flat[int(self.rng.integers(args[k].size))] = self.pick([n, n + 2, -n - 1,
                                                                        2**40])
        try:
            with np.errstate(all="ignore"):
                self.fn(*args)
            return                                  # the index is not read
        except IndexError:
            self.out_of_range = True
        runs = [*self.jits.items(), *self.grads.items(),
                ("numba, first call", tj.jit(self.fn, backend="numba"))]
        for name, transform in runs:
            self.stage = f"{name}, index out of range"
            try:
                transform(*args)
            except IndexOutOfBoundsError:
                continue
            raise Mismatch(f"{self.stage}: numpy raises IndexError, tapejit did not "
                           f"({self.program.args[k].name}: {args[k].tolist()})")

    def pick(self, items: list) -> Any:
        return items[int(self.rng.integers(len(items)))]


def check(program: RandomProgram, seed: int, index: int = 0,
          sizes: dict | None = None) -> tuple[Failure | None, Checker]:
    """Run every check of `program` (lengths, unless given, and values drawn from `seed`)."""
    checker = Checker(program, np.random.default_rng(seed))
    try:
        with compiling_first_calls():
            checker.run(sizes)
        return None, checker
    except Unsupported as err:
        kind, message = "unsupported", str(err)
    except Mismatch as err:
        kind, message = "mismatch", str(err)
    except Exception as err:  # noqa: BLE001  (any crash is a finding)
        kind, message = "crash", f"{type(err).__name__}: {err}"
    return Failure(kind, index, checker.stage, message.strip(), program.source,
                   program.describe(checker.sizes)), checker


@contextlib.contextmanager
def compiling_first_calls() -> Iterator[None]:
    """TAPEJIT_FIRST_CALL=compile while the checks run (restored after), so that each numba
    call checked runs compiled code: the default tier would interpret a program's few calls."""
    before = os.environ.get("TAPEJIT_FIRST_CALL")
    os.environ["TAPEJIT_FIRST_CALL"] = "compile"
    reload()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TAPEJIT_FIRST_CALL"]
        else:
            os.environ["TAPEJIT_FIRST_CALL"] = before
        reload()


def _symptom(failure: Failure) -> tuple[str, str, bool]:
    """What a shrunk program must still show: the kind, the transform and backend, and
    whether it needed new lengths."""
    return failure.kind, failure.stage.split(",")[0], "new lengths" in failure.stage


def shrink(program: RandomProgram, seed: int, failure: Failure, sizes: dict) -> Failure:
    """The failure of the shortest prefix of `program` (with the same first lengths) that
    fails the same way; `failure` itself where none does."""
    for line in program.lines[:-1]:
        smaller = program.upto(line.name)
        if smaller.scalar and not smaller.float_positions:
            continue
        kept = {sym: n for sym, n in sizes.items() if sym in smaller.symbols()}
        found, _ = check(smaller, seed, failure.index, kept)
        if found is not None and _symptom(found) == _symptom(failure):
            return found
    return failure


def program_seed(seed: int, index: int) -> np.random.SeedSequence:
    return np.random.SeedSequence([seed, index])


def run(programs: int, seed: int = 0, structures: int | None = None, shrinking: bool = True,
        progress: Callable[[int, Report], None] | None = None) -> Report:
    """Check `programs` random programs from `seed`. With `structures`, program i has the
    statements of program `i % structures` and differs only in its lengths and values (they
    share compiled code). `progress(i, report)` is called after each program."""
    report = Report()
    start = time.perf_counter()
    for i in range(programs):
        program = generate(program_seed(seed, i % structures if structures else i))
        values_seed = int(program_seed(seed, i).generate_state(1)[0])
        failure, checker = check(program, values_seed, i)
        if failure is not None and failure.kind != "unsupported" and shrinking:
            failure = shrink(program, values_seed, failure, checker.first)
        report.gradients += bool(checker.grads)
        report.out_of_range += checker.out_of_range
        report.fd_checked += checker.fd_checked
        report.numba_calls += checker.numba_calls
        report.compiled_calls += checker.numba_calls - checker.interpreted_calls()
        for transform in checker.compiled():
            made = transform.cache_info()["codegen"]
            report.llvm_programs += made["llvm"]
            report.numba_programs += made["numba"]
        report.guarded += checker.guarded_variants()
        report.add(failure)
        report.seconds = time.perf_counter() - start
        if progress is not None:
            progress(i, report)
    return report
