"""Dispatch overhead: microseconds per call of the gradient of sum(x*x) for x of 10 float64.

All Python overhead is included: the time is `g(x)` in a loop, where `g = tj.grad(f)` was
called once before (the first call traces, differentiates and, with the compiler, compiles).
What is measured is argument flattening, the cache lookup, the call into the compiled (or
interpreted) tape and building the result. Goal: <= 3 us per call. JAX's `jit(grad)` on the
same problem took 8.6 us per call on another machine; it is printed as a reference constant.

Rows: tapejit `tj.grad` and `tj.value_and_grad` with `backend="numba"` ("tapejit [numba]", the
row the goal is about; its first, compiling call happens before timing and is in the note) and
with `backend="interpret"` ("tapejit [interpret]"), a hand-written numpy gradient (`2 * x`), a
hand-written `@njit` gradient, a Python no-op call (the floor), JAX `jit(grad)` and PyTorch
where installed.

    .venv/bin/python bench/dispatch.py [--n 10] [--repeats 15] [--quick [--with-numba]] [--no-numba]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import numba
import numpy as np

import tapejit as tj

GOAL_US = 3.0
JAX_MEASURED_US = 8.6
JAX_LABEL = "JAX jit(grad) (measured elsewhere)"


def f(x):
    return np.sum(x * x)


@numba.njit(cache=True)
def numba_grad(x):
    return 2.0 * x


def numpy_grad(x):
    return 2.0 * x


def noop(x):
    return x


def main() -> None:
    parser = H.make_parser(__doc__, repeats=15)
    parser.add_argument("--n", type=int, default=10, help="elements of x (default 10)")
    args = H.parse_args(parser)
    min_run_s = 0.005 if args.quick else 0.1
    H.print_header("bench/dispatch.py: per-call overhead of a tiny gradient", args,
                   extra=f"each run loops the call for >= {min_run_s * 1e3:.0f} ms")

    x = np.linspace(-1.0, 1.0, args.n)
    want = 2.0 * x
    variants = H.tapejit_variants(args)
    main_label = H.main_label(variants)
    fns, notes = {}, {}
    for label, kw in variants:
        g = tj.grad(f, **kw)
        vg = tj.value_and_grad(f, **kw)
        fc = H.first_call(f"{label} grad", g, x)
        H.check_close(f"{label} grad vs 2x", fc.result, want, rtol=1e-15)
        fcv = H.first_call(f"{label} value_and_grad", vg, x)
        v, gv = fcv.result
        H.check_close(f"{label} value_and_grad vs (sum x^2, 2x)", [v, gv], [np.sum(x * x), want],
                      rtol=1e-15)
        fns[f"{label} grad"], notes[f"{label} grad"] = g, fc.note
        fns[f"{label} value_and_grad"], notes[f"{label} value_and_grad"] = vg, fcv.note
    H.check_close("numba gradient vs 2x", numba_grad(x), want, rtol=1e-15)

    table = H.Table(f"gradient of sum(x*x), x: {args.n} float64 -- time per call",
                    ref=JAX_LABEL, ratio_name=f"x JAX ({JAX_MEASURED_US} us)")
    for label, fn in fns.items():
        goal = f"<= {GOAL_US:.1f} us" if label.startswith(main_label) else ""
        table.add(label, H.measure(lambda: fn(x), args.repeats, min_run_s=min_run_s), goal=goal,
                  note=notes[label])
    table.add_constant(JAX_LABEL, seconds=JAX_MEASURED_US * 1e-6,
                       note="reference constant, not run here")
    H.framework_rows(table, [x], [0], [want], args.repeats,
                     make_jax=lambda jnp: (lambda x: jnp.sum(x * x)),
                     make_torch=lambda torch: (lambda x: torch.sum(x * x)),
                     rtol=1e-12, min_run_s=min_run_s)
    table.add("numpy 2*x (hand-written)", H.measure(lambda: numpy_grad(x), args.repeats,
                                                    min_run_s=min_run_s))
    table.add("@njit 2*x (hand-written)", H.measure(lambda: numba_grad(x), args.repeats,
                                                    min_run_s=min_run_s))
    table.add("python no-op call (floor)", H.measure(lambda: noop(x), args.repeats,
                                                     min_run_s=min_run_s))
    table.print()

    us = table.seconds(f"{main_label} grad")
    rec = {"workload": f"dispatch: grad of sum(x*x), n={args.n}", "row": f"{main_label} grad",
           "interpret_seconds": table.seconds(f"{H.INTERPRET_LABEL} grad"),
           "first_call": notes[f"{main_label} grad"]}
    H.ratio_line(f"{main_label} grad / goal {GOAL_US:.1f} us", us, GOAL_US * 1e-6, 1.0,
                 record={**rec, "reference": f"the {GOAL_US:.0f} us goal"})
    H.ratio_line(f"{main_label} grad / JAX jit(grad) (measured elsewhere, {JAX_MEASURED_US} us)",
                 us, JAX_MEASURED_US * 1e-6, GOAL_US / JAX_MEASURED_US,
                 record={**rec, "reference": f"JAX jit(grad), {JAX_MEASURED_US} us (constant)"})
    print(f"   {main_label} grad: {us * 1e6:.2f} us per call (goal <= {GOAL_US:.1f} us)")


if __name__ == "__main__":
    main()
