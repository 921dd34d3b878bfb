"""Elementwise gradient: d/dx sum(sin(x)*exp(-x*x) + tanh(x)*x) for x of 10^7 elements.

Rows (float64, then float32):
  - "tapejit [numba]": `tj.grad(f, backend="numba")` (the goals are about this row; its first,
    compiling call happens before timing and its time is in the note); its loop calls
    tapejit's vectorisable exp/sin/cos/tanh (codegen/vmath.py);
  - "tapejit [numba, libm]": the same program compiled with TAPEJIT_FAST_MATH=0 (libm calls);
  - "tapejit [interpret]": `tj.grad(f, backend="interpret")` (numpy, op by op);
  - a hand-written fused Numba gradient loop (`@njit`, single thread, scalar loop computing
    cos(x)e^{-x^2} - 2x sin(x)e^{-x^2} + (1 - tanh^2 x) x + tanh x) -- the ratio reference;
  - a hand-written numpy gradient;
  - JAX `jit(grad)`, PyTorch eager autograd and `torch.compile` where installed.
Goal (issue 6): tapejit on one thread <= 0.5x the Numba loop, and <= the numpy gradient.

    .venv/bin/python bench/elementwise.py [--n 10000000] [--repeats 7] [--quick [--with-numba]] [--no-numba]
        [--interleave]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import math
import os
import time

import numba
import numpy as np

import tapejit as tj
from tapejit import config

LIBM_LABEL = "tapejit [numba, libm]"
GOAL_VS_NUMBA = 0.5
GOAL_VS_NUMPY = 1.0


def f(x):
    return np.sum(np.sin(x) * np.exp(-x * x) + np.tanh(x) * x)


@numba.njit(cache=True, nogil=True)
def _numba_grad_kernel(x, out, one, two):
    for i in range(x.shape[0]):
        xi = x[i]
        e = math.exp(-xi * xi)
        t = math.tanh(xi)
        out[i] = math.cos(xi) * e - two * xi * math.sin(xi) * e + (one - t * t) * xi + t


def numba_grad(x: np.ndarray) -> np.ndarray:
    """Hand-written fused gradient loop; constants in x's dtype so float32 stays float32."""
    out = np.empty_like(x)
    _numba_grad_kernel(x, out, x.dtype.type(1.0), x.dtype.type(2.0))
    return out


def numpy_grad(x: np.ndarray) -> np.ndarray:
    """Hand-written numpy gradient (no tape): the same formula, a few temporaries reused."""
    e = np.exp(-x * x)
    t = np.tanh(x)
    g = np.cos(x)
    g *= e
    s = np.sin(x)
    s *= x
    s *= e
    s *= 2
    g -= s
    t2 = t * t
    np.subtract(1, t2, out=t2)
    t2 *= x
    g += t2
    g += t
    return g


def _jax_f(jnp):
    return lambda x: jnp.sum(jnp.sin(x) * jnp.exp(-x * x) + jnp.tanh(x) * x)


def _torch_f(torch):
    return lambda x: torch.sum(torch.sin(x) * torch.exp(-x * x) + torch.tanh(x) * x)


def libm_grad(label: str, x: np.ndarray) -> tuple:
    """`grad(f)` compiled with TAPEJIT_FAST_MATH=0, and its first call's note."""
    saved = os.environ.get("TAPEJIT_FAST_MATH")
    os.environ["TAPEJIT_FAST_MATH"] = "0"
    config.reload()
    try:
        g = tj.grad(f, backend="numba")
        return g, H.first_call(label, g, x)
    finally:
        if saved is None:
            del os.environ["TAPEJIT_FAST_MATH"]
        else:
            os.environ["TAPEJIT_FAST_MATH"] = saved
        config.reload()


def bench_dtype(dtype: type, n: int, args) -> dict:
    rng = np.random.default_rng(0)
    x = rng.uniform(-3.0, 3.0, size=n).astype(dtype)
    name = np.dtype(dtype).name
    rtol, atol = (1e-10, 1e-12) if dtype == np.float64 else (2e-4, 2e-5)

    # correctness first: every timed row must agree with the float64 formula
    exact = numba_grad(x.astype(np.float64))
    variants = H.tapejit_variants(args)
    main_label = H.main_label(variants)
    grads, notes = {}, {}
    for label, kw in variants:
        g = tj.grad(f, **kw)
        fc = H.first_call(f"{label} {name}", g, x)
        H.check_close(f"{label} {name} vs hand-written derivative", fc.result, exact, rtol, atol)
        grads[label], notes[label] = g, fc.note
    if H.numba_row_wanted(args):
        g, fc = libm_grad(f"{LIBM_LABEL} {name}", x)
        H.check_close(f"{LIBM_LABEL} {name} vs hand-written derivative", fc.result, exact,
                      rtol, atol)
        grads[LIBM_LABEL], notes[LIBM_LABEL] = g, fc.note
    H.check_close(f"numba loop {name} vs float64 derivative", numba_grad(x), exact, rtol, atol)
    H.check_close(f"numpy gradient {name} vs float64 derivative", numpy_grad(x), exact, rtol, atol)

    ref_label = "numba fused loop (hand-written)"
    table = H.Table(f"gradient of sum(sin(x)*exp(-x*x) + tanh(x)*x), x: {n:,} {name}",
                    ref=ref_label, ratio_name="x numba loop")
    times = {}
    for label, g in grads.items():
        goal = (f"<= {GOAL_VS_NUMBA:.2f}x numba loop, <= numpy grad" if label == main_label else "")
        times[label] = table.add(label, H.measure(lambda: g(x), args.repeats), goal=goal,
                                 note=notes[label]).seconds
    table.add(ref_label, H.measure(lambda: numba_grad(x), args.repeats),
              note="@njit, 1 thread, scalar libm")
    table.add("numpy gradient (hand-written)", H.measure(lambda: numpy_grad(x), args.repeats))
    H.framework_rows(table, [x], [0], [exact], args.repeats, make_jax=_jax_f,
                     make_torch=_torch_f, rtol=rtol, atol=atol)
    table.print()
    rec = {"row": main_label, "interpret_seconds": times.get(H.INTERPRET_LABEL),
           "first_call": notes[main_label]}
    H.ratio_line(f"{main_label} / numba loop ({name})", times[main_label],
                 table.seconds(ref_label), GOAL_VS_NUMBA,
                 record={**rec, "workload": f"elementwise {name} (n={n:,})",
                         "reference": "hand-written @njit fused loop"})
    if LIBM_LABEL in times:
        H.ratio_line(f"{main_label} / {LIBM_LABEL} ({name})", times[main_label],
                     times[LIBM_LABEL])
    H.ratio_line(f"{main_label} / numpy gradient ({name})", times[main_label],
                 table.seconds("numpy gradient (hand-written)"), GOAL_VS_NUMPY,
                 record={**rec, "workload": f"elementwise {name} (n={n:,})",
                         "reference": "hand-written numpy gradient"})
    return times


def _framework_calls(x: np.ndarray) -> dict:
    """Zero-argument gradient calls of JAX jit(grad) and torch.compile, where installed."""
    calls = {}
    if H.have("jax"):
        import jax
        import jax.numpy as jnp
        if x.dtype == np.float64:
            jax.config.update("jax_enable_x64", True)
        jx, jg = jnp.asarray(x), jax.jit(jax.grad(_jax_f(jnp)))
        calls["jax jit(grad)"] = lambda: jg(jx).block_until_ready()
    if H.have("torch"):
        import torch
        torch.set_num_threads(1)
        tf, tx = torch.compile(_torch_f(torch)), torch.from_numpy(x).requires_grad_(True)
        calls["torch.compile (fwd+bwd)"] = lambda: torch.autograd.grad(tf(tx), [tx])
    return calls


def interleaved(dtype: type, n: int, repeats: int) -> None:
    """Medians with the rows taking turns in every repeat, so that a change of load on a shared
    machine hits every row alike (the table above times one row after another)."""
    x = np.random.default_rng(0).uniform(-3.0, 3.0, size=n).astype(dtype)
    g = tj.grad(f, backend="numba")
    calls = {H.NUMBA_LABEL: lambda: g(x), "numba fused loop (hand-written)": lambda: numba_grad(x),
             **_framework_calls(x)}
    runs: dict = {label: [] for label in calls}
    for _ in range(H.WARMUP + repeats):
        for label, call in calls.items():
            t0 = time.perf_counter()
            call()
            runs[label].append(time.perf_counter() - t0)
    table = H.Table(f"interleaved, x: {n:,} {np.dtype(dtype).name}",
                    ref="numba fused loop (hand-written)", ratio_name="x numba loop")
    for label, times in runs.items():
        table.add(label, H.Timing.of(times[H.WARMUP:]))
    table.print()


def main() -> None:
    parser = H.make_parser(__doc__, repeats=7)
    parser.add_argument("--n", type=int, default=None, help="elements (default 10^7; 10^5 with --quick)")
    parser.add_argument("--dtypes", default="float64,float32", help="comma-separated dtypes")
    parser.add_argument("--interleave", action="store_true",
                        help="then time tapejit, the Numba loop, JAX and torch.compile taking "
                             "turns in every repeat")
    args = H.parse_args(parser)
    n = args.n or (100_000 if args.quick else 10_000_000)
    H.print_header("bench/elementwise.py: fused elementwise gradient", args)
    for name in args.dtypes.split(","):
        bench_dtype(np.dtype(name.strip()).type, n, args)
    if args.interleave:
        for name in args.dtypes.split(","):
            interleaved(np.dtype(name.strip()).type, n, args.repeats)


if __name__ == "__main__":
    main()
