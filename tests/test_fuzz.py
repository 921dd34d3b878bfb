"""The random-program check (tools/selfcheck.py, tools/program_generator.py) on a budget for
CI: compiled == interpreted == numpy, gradients against finite differences, and a later call
with new lengths.

The hypothesis test draws a structure from a small pool and the lengths and values anew, so
most examples reuse compiled code (sizes are run-time slots; lengths 0 and 1 are written into
the code, so those combinations compile once each). `python -m tapejit selfcheck` runs longer.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from tapejit import config
from tapejit.tools import cli, program_generator, selfcheck
from tapejit.tools.selfcheck import generate

SEED = 17            # issue 17
STRUCTURES = 8       # distinct programs the hypothesis test draws from
EXAMPLES = 200


def structure(k: int) -> program_generator.RandomProgram:
    return generate(selfcheck.program_seed(SEED, k))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          phases=(Phase.explicit, Phase.generate))
@given(k=st.integers(0, STRUCTURES - 1), values=st.integers(0, 2**32 - 1))
def test_compiled_agrees_with_numpy(k: int, values: int) -> None:
    program = structure(k)
    failure, checker = selfcheck.check(program, values)
    if failure is not None and failure.kind != "unsupported":
        failure = selfcheck.shrink(program, values, failure, checker.first)
        pytest.fail(f"structure {k}, values {values}: {failure.text()}", pytrace=False)


def test_selfcheck_runs_on_the_llvm_lowering() -> None:
    """By default the random programs compile with tapejit's LLVM lowering (codegen/llvm/):
    a small seeded batch agrees with numpy, and its programs are the lowering's."""
    report = selfcheck.run(programs=6, seed=34, shrinking=False)
    assert report.ok, "\n".join(f.text() for f in report.failures)
    assert report.compiled_calls > 0 and report.llvm_programs > 0
    assert report.numba_programs < report.llvm_programs


def test_selfcheck_compiles_under_the_default_first_call_tier(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`tapejit selfcheck` run as a user runs it (TAPEJIT_FIRST_CALL unset: a new program's
    first calls would run on the interpreter) still checks compiled code on every numba call,
    and leaves the setting as it found it."""
    monkeypatch.delenv("TAPEJIT_FIRST_CALL")
    config.reload()
    try:
        report = selfcheck.run(programs=3, seed=34, shrinking=False)
        assert config.config().first_call == "interpret"
    finally:
        monkeypatch.undo()
        config.reload()
    assert report.ok, "\n".join(f.text() for f in report.failures)
    assert report.numba_calls > 0 and report.compiled_calls == report.numba_calls
    assert report.llvm_programs + report.numba_programs > 0


def test_selfcheck_programs_with_parallel_nests(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same batch with parallel nests from 4 elements on, on 2 threads: the lowering's
    chunked loops and per-chunk sums agree with numpy."""
    monkeypatch.setenv("TAPEJIT_PARALLEL_MIN_SIZE", "4")
    monkeypatch.setenv("TAPEJIT_NUM_THREADS", "2")
    config.reload()
    try:
        parallel = 0
        for k in range(6):
            failure, checker = selfcheck.check(generate(selfcheck.program_seed(34, k)), k, k)
            assert failure is None, failure.text()
            programs = checker.programs()
            assert {p.codegen for p in programs} == {"llvm"}
            parallel += sum("numba.prange" in p.source for p in programs)
    finally:
        monkeypatch.undo()
        config.reload()
    assert parallel >= 3


def test_generated_programs_are_valid_numpy() -> None:
    """Every program runs on numpy at its first and at new lengths (the generator's contract:
    a failure of tapejit is never the program's fault)."""
    rng = np.random.default_rng(0)
    for i in range(300):
        program = generate(selfcheck.program_seed(1, i))
        fn = program.function()
        for choices in (program_generator.SIZES, program_generator.NEW_SIZES):
            sizes = program.draw_sizes(rng, choices=choices)
            with np.errstate(all="raise"):
                out = np.asarray(fn(*program.arguments(sizes, rng)))
            assert np.all(np.isfinite(out)), program.source
            assert out.shape == () or not program.scalar, program.source


def test_programs_cover_the_promised_features() -> None:
    """Equal lengths on different axes, broadcasts, reductions, layout, indexing, products,
    control flow (loop carries that trade arrays too), linear algebra, order statistics and
    special functions all occur in a few hundred programs."""
    programs = [generate(selfcheck.program_seed(2, i)) for i in range(400)]
    text = "".join(p.source for p in programs)
    for feature in ("[None]", "[:, None]", "keepdims=True", "axis=", ".T", "reshape", "[1:]",
                    "[::2]", "np.concatenate", "np.stack", "@", "np.einsum", "np.outer",
                    "np.dot", "np.where", "np.maximum", "np.exp", "np.log", "np.sqrt", "** 2",
                    "tj.fori_loop", "lambda i, c: (c[1]", "tj.scan", "tj.cond", "i0",
                    "np.take", ".max(", "np.mean", "np.sort", "np.median", "np.linalg.solve",
                    "np.linalg.cholesky", "np.linalg.inv", "np.linalg.slogdet",
                    "np.percentile", "np.quantile", "np.cumsum", "sp.erf", "sp.expit",
                    "sp.gammaln", "sp.xlogy"):
        assert feature in text, feature
    rng = np.random.default_rng(0)
    shapes = [program.describe(program.draw_sizes(rng)) for program in programs]
    assert sum("(0" in s or ", 0" in s for s in shapes) > 20        # empty axes
    assert sum(_square(s) for s in shapes) > 50                     # equal lengths, two axes


def _square(shapes: str) -> bool:
    return any(f"({n}, {n}" in shapes for n in (2, 3))


def test_compare_reports_values_shapes_and_dtypes() -> None:
    selfcheck.compare((np.ones(2), 1.0), (np.ones(2), 1.0), "same")
    for got, want in [(np.ones(2), np.ones(3)), (np.ones(2, np.float32), np.ones(2)),
                      (np.array([1.0, 2.0]), np.array([1.0, 2.5])), (np.ones(2), (np.ones(2),))]:
        with pytest.raises(selfcheck.Mismatch):
            selfcheck.compare(got, want, "differ")


def test_finite_differences_find_a_wrong_gradient_and_skip_kinks() -> None:
    rng = np.random.default_rng(0)
    x = [np.array([0.3, -0.2])]
    square = lambda x: np.sum(x ** 2)  # noqa: E731
    assert selfcheck.finite_differences(square, x, (0,), [2 * x[0]], rng)
    with pytest.raises(selfcheck.Mismatch):
        selfcheck.finite_differences(square, x, (0,), [3 * x[0]], rng)
    assert not selfcheck.finite_differences(lambda x: np.sum(np.abs(x)), [np.zeros(2)], (0,),
                                            [np.zeros(2)], rng)


def test_cli_selfcheck(capsys: pytest.CaptureFixture[str]) -> None:
    """A tiny budget through the command line (in process: it reuses the programs compiled
    above)."""
    status = cli.main(["selfcheck", "--programs", "3", "--seed", str(SEED),
                       "--structures", "3", "--every", "1"])
    out = capsys.readouterr().out
    assert "tapejit selfcheck: 3 programs from seed 17" in out
    assert "  3/3: " in out and "3 programs: " in out and " numba calls ran compiled" in out
    assert status == (0 if "0 mismatches, 0 crashes" in out else 1), out


GUARDED = ("if np.sum", "int(np.sum", "k0")     # what selfcheck's guarded statement writes


def test_guarded_programs_agree_with_numpy_on_every_branch() -> None:
    """Programs ending in a Python `if`, `int()` or a Python int parameter used as an index or
    slice bound (drawn anew each call) agree with numpy on every call, compiled and
    interpreted, each branch a guarded variant of its own: no call runs another's branch."""
    programs = [generate(selfcheck.program_seed(35, i)) for i in range(60)]
    guarded = [p for p in programs if any(t in p.source for t in GUARDED)][:8]
    variants = []
    for k, program in enumerate(guarded):
        failure, checker = selfcheck.check(program, k, k)
        assert failure is None, failure.text()
        variants.append(checker.guarded_variants())
    assert len(guarded) == 8 and sum(n >= 2 for n in variants) >= 3, variants


def test_a_guard_that_changes_retraces_before_a_later_bounds_check_raises() -> None:
    import tapejit as tj

    def f(x, k):
        t = x[min(k, x.shape[0] - 1)]      # k=2: min returns k, a run-time index
        if t > 0.5:                         # a later guard, reading x[k]
            return t * 2
        return t

    g = tj.grad(f)
    x = np.arange(3.0)
    assert np.array_equal(g(x, 2), [0.0, 0.0, 2.0])
    assert np.array_equal(g(x, 3), [0.0, 0.0, 2.0])    # min(3, 2) == 2: numpy's answer
