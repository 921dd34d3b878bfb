"""ODE gradient: a loss on the final state of 1,000 RK4 steps of Lotka-Volterra w.r.t. 4 parameters.

    dx/dt = a x - b x y,   dy/dt = c x y - d y,   loss = (x_T - 1)^2 + (y_T - 0.5)^2

Rows: tapejit `tj.grad(loss)` with the steps written as `tj.fori_loop` ("tapejit [numba]", the
row the goal is about; "tapejit [interpret]"); the reference, a hand-written `@njit` forward
loop storing the states plus its hand-derived adjoint loop; JAX `jit(grad)` of `lax.scan`
where installed (time and first call). Goal: tapejit <= 2x the Numba loop.

First calls: `--first-calls` (on by default, not with --quick) runs a fresh process per step
count with an empty TAPEJIT_CACHE_DIR and times its first call (trace + differentiate + compile
+ run): the trace and the generated program do not depend on the number of steps, so the
first call for 100,000 steps should cost <= 1.2x the one for 100 steps.

    .venv/bin/python bench/ode.py [--steps 1000] [--repeats 9] [--quick] [--no-first-calls]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import json
import os
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np

import tapejit as tj

GOAL = 2.0
FIRST_CALL_GOAL = 1.2
P0 = np.array([1.1, 0.4, 0.1, 0.4])
STATE0 = (1.0, 2.0)
DT = 0.01


def field(p, x, y):
    return p[0] * x - p[1] * x * y, p[2] * x * y - p[3] * y


def rk4(p, x, y):
    k1x, k1y = field(p, x, y)
    k2x, k2y = field(p, x + 0.5 * DT * k1x, y + 0.5 * DT * k1y)
    k3x, k3y = field(p, x + 0.5 * DT * k2x, y + 0.5 * DT * k2y)
    k4x, k4y = field(p, x + DT * k3x, y + DT * k3y)
    return (x + DT / 6 * (k1x + 2 * k2x + 2 * k3x + k4x),
            y + DT / 6 * (k1y + 2 * k2y + 2 * k3y + k4y))


def make_loss(steps: int):
    def loss(p):
        x, y = tj.fori_loop(0, steps, lambda i, s: rk4(p, *s), STATE0)
        return (x - 1.0) ** 2 + (y - 0.5) ** 2
    return loss


@numba.njit(cache=True, inline="always")
def _f(a, b, c, d, x, y):
    return a * x - b * x * y, c * x * y - d * y


@numba.njit(cache=True, inline="always")
def _f_vjp(a, b, c, d, x, y, vx, vy):
    """(x, y, a, b, c, d) cotangents of the field at (x, y) for the output cotangent (vx, vy)."""
    return (vx * (a - b * y) + vy * c * y, -vx * b * x + vy * (c * x - d),
            vx * x, -vx * x * y, vy * x * y, -vy * y)


@numba.njit(cache=True)
def numba_value_and_grad(p, steps):
    """Hand-written: RK4 forward storing the states, then the adjoint loop backwards
    (recomputing each step's stages)."""
    a, b, c, d = p[0], p[1], p[2], p[3]
    h = DT
    xs, ys = np.empty(steps + 1), np.empty(steps + 1)
    x, y = STATE0
    for k in range(steps):
        xs[k], ys[k] = x, y
        k1x, k1y = _f(a, b, c, d, x, y)
        k2x, k2y = _f(a, b, c, d, x + 0.5 * h * k1x, y + 0.5 * h * k1y)
        k3x, k3y = _f(a, b, c, d, x + 0.5 * h * k2x, y + 0.5 * h * k2y)
        k4x, k4y = _f(a, b, c, d, x + h * k3x, y + h * k3y)
        x += h / 6 * (k1x + 2 * k2x + 2 * k3x + k4x)
        y += h / 6 * (k1y + 2 * k2y + 2 * k3y + k4y)
    value = (x - 1.0) ** 2 + (y - 0.5) ** 2
    lx, ly = 2 * (x - 1.0), 2 * (y - 0.5)
    g = np.zeros(4)
    for k in range(steps - 1, -1, -1):
        x, y = xs[k], ys[k]
        k1x, k1y = _f(a, b, c, d, x, y)
        x2, y2 = x + 0.5 * h * k1x, y + 0.5 * h * k1y
        k2x, k2y = _f(a, b, c, d, x2, y2)
        x3, y3 = x + 0.5 * h * k2x, y + 0.5 * h * k2y
        k3x, k3y = _f(a, b, c, d, x3, y3)
        x4, y4 = x + h * k3x, y + h * k3y
        # s' = s + h/6 (k1 + 2 k2 + 2 k3 + k4), k_i = f(s_i): stages in reverse order
        g4x, g4y, a4, b4, c4, d4 = _f_vjp(a, b, c, d, x4, y4, h / 6 * lx, h / 6 * ly)
        v3x, v3y = h / 3 * lx + h * g4x, h / 3 * ly + h * g4y
        g3x, g3y, a3, b3, c3, d3 = _f_vjp(a, b, c, d, x3, y3, v3x, v3y)
        v2x, v2y = h / 3 * lx + 0.5 * h * g3x, h / 3 * ly + 0.5 * h * g3y
        g2x, g2y, a2, b2, c2, d2 = _f_vjp(a, b, c, d, x2, y2, v2x, v2y)
        v1x, v1y = h / 6 * lx + 0.5 * h * g2x, h / 6 * ly + 0.5 * h * g2y
        g1x, g1y, a1, b1, c1, d1 = _f_vjp(a, b, c, d, x, y, v1x, v1y)
        g[0] += a1 + a2 + a3 + a4
        g[1] += b1 + b2 + b3 + b4
        g[2] += c1 + c2 + c3 + c4
        g[3] += d1 + d2 + d3 + d4
        nx, ny = lx + g1x + g2x + g3x + g4x, ly + g1y + g2y + g3y + g4y
        lx, ly = nx, ny
    return value, g


def jax_rows(table: H.Table, steps: int, want: np.ndarray, repeats: int) -> None:
    """JAX jit(grad) of lax.scan: time, and the first call (compile) as a note."""
    if not H.have("jax"):
        table.add_missing("jax jit(grad) lax.scan", "not installed")
        return
    try:
        import jax
        import jax.numpy as jnp
        jax.config.update("jax_enable_x64", True)

        def loss(p):
            def step(s, _):
                return rk4(p, *s), None
            (x, y), _ = jax.lax.scan(step, (jnp.float64(STATE0[0]), jnp.float64(STATE0[1])),
                                     None, length=steps)
            return (x - 1.0) ** 2 + (y - 0.5) ** 2

        g = jax.jit(jax.grad(loss))
        jp = jnp.asarray(P0)
        t0 = time.perf_counter()
        got = np.asarray(jax.block_until_ready(g(jp)))
        first = time.perf_counter() - t0
        H.check_close("jax lax.scan gradient vs numba adjoint", got, want, rtol=1e-9)
        table.add("jax jit(grad) lax.scan", H.measure(lambda: jax.block_until_ready(g(jp)),
                                                      repeats),
                  note=f"first call {H.fmt_time(first)}")
    except Exception as err:  # noqa: BLE001 - an optional peer must not stop the bench
        table.add_missing("jax jit(grad) lax.scan", f"failed: {type(err).__name__}: {err}"[:90])


def child_first_call(steps: int) -> None:
    """Run in a fresh process: print the first call's seconds and cache_info as JSON."""
    g = tj.grad(make_loss(steps), backend="numba")
    t0 = time.perf_counter()
    g(P0)
    seconds = time.perf_counter() - t0
    print(json.dumps({"steps": steps, "seconds": seconds, **g.cache_info()}, default=str))


def first_calls(counts: list[int]) -> dict[int, dict]:
    results = {}
    for steps in counts:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, TAPEJIT_CACHE_DIR=cache)
            out = subprocess.run([sys.executable, __file__, "--child", str(steps)], env=env,
                                 capture_output=True, text=True, check=True).stdout
        results[steps] = json.loads(out.strip().splitlines()[-1])
        r = results[steps]
        print(f"   first call, fresh process and cache, {steps:,} steps: "
              f"{H.fmt_time(r['seconds'])} (traces {r['traces']}, compiles {r['compiles']})")
    return results


def main() -> None:
    parser = H.make_parser(__doc__, repeats=9)
    parser.add_argument("--steps", type=int, default=None, help="RK4 steps (default 1000)")
    parser.add_argument("--no-first-calls", action="store_true",
                        help="skip the fresh-process first calls (100 and 100,000 steps)")
    parser.add_argument("--child", type=int, default=None, help=argparse_hidden())
    args = H.parse_args(parser)
    if args.child is not None:
        child_first_call(args.child)
        return
    steps = args.steps or (200 if args.quick else 1000)
    H.print_header("bench/ode.py: Lotka-Volterra RK4 gradient w.r.t. 4 parameters", args,
                   extra=f"{steps} steps, dt {DT}")
    ref_value, ref_grad = numba_value_and_grad(P0, steps)
    variants = H.tapejit_variants(args)
    main_label = H.main_label(variants)
    ref_label = "numba forward + adjoint (hand-written)"
    table = H.Table(f"loss + gradient, {steps} RK4 steps, float64", ref=ref_label,
                    ratio_name="x numba loop")
    for label, kw in variants:
        vg = tj.value_and_grad(make_loss(steps), **kw)
        fc = H.first_call(label, vg, P0)
        H.check_close(f"{label} loss vs numba", fc.result[0], ref_value, rtol=1e-12)
        H.check_close(f"{label} gradient vs numba adjoint", fc.result[1], ref_grad, rtol=1e-9)
        table.add(label, H.measure(lambda vg=vg: vg(P0), args.repeats), note=fc.note,
                  goal=f"<= {GOAL:.1f}x numba loop" if label == main_label else "")
    table.add(ref_label, H.measure(lambda: numba_value_and_grad(P0, steps), args.repeats),
              note="@njit, states stored, stages recomputed")
    jax_rows(table, steps, ref_grad, args.repeats)
    table.print()
    H.ratio_line(f"{main_label} / numba forward + adjoint", table.seconds(main_label),
                 table.seconds(ref_label), GOAL,
                 record={"workload": f"ode, {steps} RK4 steps", "row": main_label,
                         "reference": "hand-written @njit forward + adjoint"})
    if not args.quick and not args.no_first_calls and H.numba_row_wanted(args):
        calls = first_calls([100, 100_000])
        H.ratio_line("first call 100,000 steps / 100 steps", calls[100_000]["seconds"],
                     calls[100]["seconds"], FIRST_CALL_GOAL)


def argparse_hidden() -> str:
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
