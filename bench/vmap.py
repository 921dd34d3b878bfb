"""vmap: per-example gradients of a small MLP, and a simulation mapped over parameter sets.

Workload 1: the per-example gradients of a 16-32-4 tanh MLP's squared error, batch 1,024
(float64). Rows, timed interleaved (one call of each row per round, medians over the rounds):
  - tapejit `vmap(grad(loss), in_axes=(None, 0, 0))` ("tapejit vmap(grad)", the goal's row:
    one compiled program per signature, like jit);
  - tapejit's own batch gradient, `grad` of the summed loss over the batch (the same
    arithmetic but one gradient in place of 1,024; the second goal's reference);
  - JAX `jit(vmap(grad(loss)))` where installed.
Goals: tapejit vmap(grad) <= 1.0x JAX, and <= 3x tapejit's batch gradient.

Workload 2: Lotka-Volterra (explicit Euler, 1,000 steps of `tj.fori_loop`) mapped over 256
parameter sets: tapejit `vmap(simulate)` (one compiled program: the loop runs once, on every
parameter set at a time) against JAX `jit(vmap(simulate))` with `lax.fori_loop`.
Goal: <= 1.0x JAX.

Every row's answer is checked first (against a loop of the unbatched function). Pinned to one
CPU (the harness).

    .venv/bin/python bench/vmap.py [--repeats 15] [--quick [--with-numba]]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import statistics  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

import tapejit as tj  # noqa: E402

SIZES, BATCH, QUICK_BATCH = (16, 32, 4), 1024, 64
STEPS, SETS, QUICK_STEPS, QUICK_SETS = 1000, 256, 100, 16
DT = 0.01


def loss(params, x, y):
    w1, b1, w2, b2 = params
    out = np.tanh(x @ w1 + b1) @ w2 + b2
    return np.sum((out - y) ** 2)


def batch_loss(params, xs, ys):
    w1, b1, w2, b2 = params
    out = np.tanh(xs @ w1 + b1) @ w2 + b2
    return np.sum((out - ys) ** 2)


def simulate(theta, steps):
    """Prey and predator after `steps` Euler steps of Lotka-Volterra with (a, b, g, d)."""
    a, b, g, d = theta[0], theta[1], theta[2], theta[3]

    def step(i, state):
        x, y = state
        return x + DT * (a * x - b * x * y), y + DT * (d * x * y - g * y)

    x, y = tj.fori_loop(0, steps, step, (a * 0 + 1.0, a * 0 + 0.5))
    return np.stack([x, y])


def interleaved(rows: dict[str, Callable[[], Any]], repeats: int, min_run_s: float = 0.02,
                ) -> dict[str, H.Timing]:
    """Per-call seconds of each row, measured in rounds: each round times every row once
    (`number` calls, chosen so a run lasts about `min_run_s`), so a slow spell of the shared
    machine hits every row alike; medians over the rounds."""
    numbers = {}
    for label, fn in rows.items():
        for _ in range(H.WARMUP):
            fn()
        H.settle(fn)
        t0 = time.perf_counter()
        fn()
        numbers[label] = max(1, int(min_run_s / max(time.perf_counter() - t0, 1e-7)))
    runs: dict[str, list[float]] = {label: [] for label in rows}
    for _ in range(repeats):
        for label, fn in rows.items():
            t0 = time.perf_counter()
            for _ in range(numbers[label]):
                fn()
            runs[label].append((time.perf_counter() - t0) / numbers[label])
    return {label: H.Timing(statistics.median(r), min(r), max(r), numbers[label], r)
            for label, r in runs.items()}


def jax_per_example(params, xs, ys, want_grads) -> Callable[[], Any]:
    """JAX's jit(vmap(grad)) of `loss`, checked against `want_grads` (JAX must be installed)."""
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    def jloss(p, x, y):
        w1, b1, w2, b2 = p
        return jnp.sum((jnp.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2)

    per_example = jax.jit(jax.vmap(jax.grad(jloss), in_axes=(None, 0, 0)))
    H.check_close("jax jit(vmap(grad)) vs loop", [np.asarray(g) for g in
                                                 per_example(params, xs, ys)], want_grads,
                  rtol=1e-9, atol=1e-12)
    return lambda: jax.block_until_ready(per_example(params, xs, ys))


def jax_rows(params, xs, ys, thetas, steps, want_grads, want_sim) -> dict[str, Callable]:
    """JAX's jit(vmap(grad)) and jit(vmap(simulate)), checked; {} where JAX is missing."""
    if not H.have("jax"):
        return {}
    import jax
    import jax.numpy as jnp
    per_example = jax_per_example(params, xs, ys, want_grads)

    def jsim(theta):
        a, b, g, d = theta

        def step(i, state):
            x, y = state
            return x + DT * (a * x - b * x * y), y + DT * (d * x * y - g * y)

        x, y = jax.lax.fori_loop(0, steps, step, (a * 0 + 1.0, a * 0 + 0.5))
        return jnp.stack([x, y])

    sim = jax.jit(jax.vmap(jsim))
    H.check_close("jax jit(vmap(simulate)) vs loop", np.asarray(sim(thetas)), want_sim,
                  rtol=1e-9, atol=1e-12)
    return {"jax jit(vmap(grad))": per_example,
            "jax jit(vmap(simulate))": lambda: sim(thetas).block_until_ready()}


def per_example_data(batch: int) -> tuple[tuple, np.ndarray, np.ndarray, list[np.ndarray]]:
    """The MLP's parameters, `batch` inputs and targets, and the per-example gradients (a loop
    of the unbatched gradient on the interpreter)."""
    rng = np.random.default_rng(0)
    n_in, n_hidden, n_out = SIZES
    params = (rng.standard_normal((n_in, n_hidden)) / 4, rng.standard_normal(n_hidden) / 10,
              rng.standard_normal((n_hidden, n_out)) / 6, rng.standard_normal(n_out) / 10)
    xs, ys = rng.standard_normal((batch, n_in)), rng.standard_normal((batch, n_out))
    one_grad = tj.grad(loss, backend="interpret")
    per = [one_grad(params, xs[b], ys[b]) for b in range(batch)]
    return params, xs, ys, [np.stack([g[k] for g in per]) for k in range(4)]


def main() -> None:
    parser = H.make_parser(__doc__, repeats=15)
    args = H.parse_args(parser)
    batch = QUICK_BATCH if args.quick else BATCH
    steps, sets = (QUICK_STEPS, QUICK_SETS) if args.quick else (STEPS, SETS)
    variants = H.tapejit_variants(args)
    label, kw = variants[0]
    H.print_header("bench/vmap.py: per-example gradients and a mapped simulation", args,
                   extra=f"MLP {'-'.join(map(str, SIZES))}, batch {batch}; Lotka-Volterra "
                         f"{steps} steps x {sets} parameter sets", rows=label)
    params, xs, ys, want_grads = per_example_data(batch)
    thetas = np.random.default_rng(1).uniform(0.5, 1.5, (sets, 4))
    one_sim = tj.jit(lambda t: simulate(t, steps), backend="interpret")
    want_sim = np.stack([one_sim(t) for t in thetas])

    per_example = tj.vmap(tj.grad(loss), in_axes=(None, 0, 0), **kw)
    whole = tj.grad(batch_loss, **kw)
    mapped = tj.vmap(lambda t: simulate(t, steps), **kw)
    fc = H.first_call(f"{label} vmap(grad)", per_example, params, xs, ys)
    H.check_close("tapejit vmap(grad) vs loop", list(fc.result), want_grads, rtol=1e-9,
                  atol=1e-12)
    H.check_close("tapejit batch gradient vs summed loop",
                  list(H.first_call(f"{label} batch gradient", whole, params, xs, ys).result),
                  [g.sum(axis=0) for g in want_grads], rtol=1e-9, atol=1e-12)
    rows = {"tapejit vmap(grad)": lambda: per_example(params, xs, ys),
            "tapejit batch gradient": lambda: whole(params, xs, ys)}
    sim_rows: dict[str, Callable] = {}
    sim_failed = None
    try:
        sim = H.first_call(f"{label} vmap(simulate)", mapped, thetas)
        H.check_close("tapejit vmap(simulate) vs loop", sim.result, want_sim, rtol=1e-9,
                      atol=1e-12)
        programs = mapped.cache_info()["programs"]
        print(f"   tapejit vmap(simulate): {programs} compiled program(s)")
        sim_rows["tapejit vmap(simulate)"] = lambda: mapped(thetas)
    except Exception as err:  # noqa: BLE001 - report the row, keep the rest of the bench
        sim_failed = f"{type(err).__name__}: {err}".splitlines()[0][:120]
        print(f"   tapejit vmap(simulate) FAILED: {sim_failed}")
    try:
        jax = jax_rows(params, xs, ys, thetas, steps, want_grads, want_sim)
    except Exception as err:  # noqa: BLE001 - a broken optional framework must not stop it
        print(f"   jax rows failed: {type(err).__name__}: {err}".splitlines()[0][:120])
        jax = {}
    rows["jax jit(vmap(grad))"] = jax.get("jax jit(vmap(grad))")
    sim_rows["jax jit(vmap(simulate))"] = jax.get("jax jit(vmap(simulate))")
    timings = interleaved({k: v for k, v in {**rows, **sim_rows}.items() if v is not None},
                          args.repeats)

    table = H.Table(f"Per-example gradients, MLP {'-'.join(map(str, SIZES))}, batch {batch}, "
                    f"float64 ({label})", ref="jax jit(vmap(grad))", ratio_name="x JAX")
    for row, fn in rows.items():
        if fn is None:
            table.add_missing(row, "not installed" if not H.have("jax") else "failed")
        else:
            table.add(row, timings[row], note=fc.note if row == "tapejit vmap(grad)" else "")
    table.print()
    sims = H.Table(f"Lotka-Volterra, {steps} Euler steps (fori_loop) x {sets} parameter sets "
                   f"({label})", ref="jax jit(vmap(simulate))", ratio_name="x JAX")
    for row, fn in sim_rows.items():
        if fn is None:
            why = sim_failed if row.startswith("tapejit") and sim_failed else (
                "not installed" if not H.have("jax") else "failed")
            sims.add_missing(row, why)
        else:
            sims.add(row, timings[row])
    sims.print()
    record = {"workload": "vmap", "row": "tapejit vmap(grad)"}
    seconds = table.seconds
    H.ratio_line("tapejit vmap(grad) / jax jit(vmap(grad))", seconds("tapejit vmap(grad)"),
                 seconds("jax jit(vmap(grad))"), goal=1.0,
                 record={**record, "reference": "jax jit(vmap(grad))"})
    H.ratio_line("tapejit vmap(grad) / tapejit batch gradient", seconds("tapejit vmap(grad)"),
                 seconds("tapejit batch gradient"), goal=3.0,
                 record={**record, "reference": "tapejit batch gradient"})
    H.ratio_line("tapejit vmap(simulate) / jax jit(vmap(simulate))",
                 sims.seconds("tapejit vmap(simulate)"), sims.seconds("jax jit(vmap(simulate))"),
                 goal=1.0, record={"workload": "vmap", "row": "tapejit vmap(simulate)",
                                   "reference": "jax jit(vmap(simulate))"})


if __name__ == "__main__":
    main()
