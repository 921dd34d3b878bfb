"""Generated functions of bounded size (codegen/segments.py): a long tape runs as a chain of
segment functions, and computes what the one-function program computes, compiled and on the
interpreter, values and gradients, first and later calls."""
from __future__ import annotations

import numpy as np
import pytest

import tapejit as tj
from tapejit import config
from tapejit.tools import selfcheck
from tapejit.codegen import cpu, segments
from tapejit.codegen.llvm.lower import lower
from tapejit.compile import lowering
from tapejit.interpret import interpret
from tapejit.passes import fused, optimize
from tapejit.tools.selfcheck import generate


@pytest.fixture
def tiny_segments(monkeypatch, tmp_path):
    """Segments of at most two ops: every program of more than two splits. A cache directory
    of its own: the generated modules remembered on disk (disk/memo.py) are keyed by the tape, not
    by these limits."""
    monkeypatch.setattr(segments, "MAX_SEGMENT_OPS", 2)
    monkeypatch.setattr(segments, "SEGMENT_ABOVE", 2)
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    config.reload()
    yield
    monkeypatch.undo()
    config.reload()


def euler(p, steps=12):
    """A loop whose steps differ (a coefficient per step): it stays unrolled."""
    x, y = p[0], p[1]
    for k in range(steps):
        x, y = x + 0.01 * (k % 3 + 1) * (x - x * y), y + 0.01 * (x * y - y * p[2])
    return np.stack([x, y, x * y])


def mixed(a, m):
    """Arrays, 0-d values, a (1, 1) value, a product and a reduction across segments."""
    s = np.sum(a * a)
    h = np.tanh(m @ a[:, None] + s)
    k = np.mean(h, keepdims=True)
    return np.sum(h * k) + s, a * s


P = np.array([1.3, 0.7, 0.4])


def test_a_long_tape_becomes_a_chain_of_bounded_segments(tiny_segments):
    tape = fused(optimize(tj.make_tape(tj.grad(lambda p: np.sum(euler(p) ** 2)))(P)))
    chained = segments.segmented(tape)
    assert len(tape.eqns) > 4
    assert all(e.op == "segment" for e in chained.eqns) and len(chained.eqns) > 2
    for segment in chained.eqns:             # at most two ops, or one eqn larger than that
        body = segment.kw["body"].eqns
        assert sum(map(segments._weight, body)) <= 2 or len(body) == 1
    for got, want in zip(interpret(chained, [P]), interpret(tape, [P])):
        np.testing.assert_array_equal(got, want)


def test_a_short_tape_stays_one_function(monkeypatch):
    tape = fused(optimize(tj.make_tape(lambda x: np.sin(x) * 2.0)(P)))
    assert segments.segmented(tape) is tape
    # longer than a segment, but not than SEGMENT_ABOVE: one function, without its overhead
    monkeypatch.setattr(segments, "MAX_SEGMENT_OPS", 2)
    tape = fused(optimize(tj.make_tape(tj.grad(lambda p: np.sum(euler(p) ** 2)))(P)))
    assert sum(map(segments._weight, tape.eqns)) > 2 and segments.segmented(tape) is tape
    monkeypatch.setattr(segments, "SEGMENT_ABOVE", 2)
    assert segments.segmented(tape) is not tape


@pytest.mark.parametrize("fn, args", [
    (lambda p: np.sum(euler(p) ** 2), (P,)),
    (lambda a, m: mixed(a, m)[0] + np.sum(mixed(a, m)[1]),
     (np.linspace(0.1, 0.4, 3), np.eye(3) + 0.1)),
])
def test_segmented_programs_compute_what_one_function_does(tiny_segments, fn, args):
    want = tj.value_and_grad(fn, backend="interpret")(*args)
    compiled = tj.value_and_grad(fn, backend="numba")
    for _ in range(2):                                  # first and later calls
        got = compiled(*args)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)


def test_segmented_source_calls_its_segments_in_order(tiny_segments):
    tape = fused(optimize(tj.make_tape(tj.value_and_grad(lambda p: np.sum(euler(p, 4))))(P)))
    source = cpu.generate(tape).source
    entry = source[source.index("def entry"):]
    calls = [line.split("= ")[1].split("(")[0] for line in entry.splitlines()
             if "_s = segment" in line]
    assert len(calls) > 3 and calls == sorted(calls, key=lambda c: int(c[len("segment"):]))


def test_the_llvm_lowering_keeps_segments_out_of_line(tiny_segments):
    """LLVM inlines a function called once; a segment's `noinline` keeps the passes' work per
    segment (an unrolled 10-step LSTM gradient: 21 s of O3 as one function, 3.8 s so)."""
    from tapejit.codegen.llvm import jit
    tape = fused(optimize(tj.make_tape(tj.value_and_grad(lambda p: np.sum(euler(p, 4))))(P)))
    ir = lower(*lowering(tape, cpu.generate(tape))[0]).ir
    segments = {line.split("@")[1].split("(")[0] for line in ir.splitlines()
                if line.startswith("define internal") and " noinline" in line}
    optimised = str(jit._optimised(ir))     # an inlined function called once is deleted
    kept = {s for s in segments if f"@{s}(" in optimised.split("define", 1)[1]}
    assert len(segments) > 3 and kept == segments


@pytest.mark.parametrize("k", range(4))
def test_random_programs_agree_when_split(tiny_segments, k):
    """The random-program check (compiled == interpreted == numpy, gradients against finite
    differences) on programs split into segments of two ops."""
    program = generate(selfcheck.program_seed(20, k))
    failure, _ = selfcheck.check(program, 1234 + k)
    assert failure is None or failure.kind == "unsupported", failure.text()


def test_segments_reuse_their_buffers_and_agree_call_after_call(tiny_segments):
    """A segment's arrays (no frames: the runtime's allocator makes them) of 160 kB come back
    from the allocator's cache in the next call, holding the last call's values: each call
    still computes what the interpreter does, on new inputs and again on the first."""
    from tapejit.codegen.llvm import runtime
    fn = lambda p: np.sum(euler(p, 4) ** 2)      # noqa: E731
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(0.2, 0.9, (3, 20_000)) for _ in range(2)]
    compiled = tj.value_and_grad(fn, backend="numba")
    reference = tj.value_and_grad(fn, backend="interpret")
    runtime.release_memory()
    for p in inputs + inputs[:1]:
        got, want = compiled(p), reference(p)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-12)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-12, atol=1e-14)
    assert runtime.cached_bytes() >= 20_000 * 8
    tj.clear_cache()
    assert runtime.cached_bytes() == 0
