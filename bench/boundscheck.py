"""The cost of the bounds checks on traced indices: each tapejit gradient of bench/peers.py's
workloads, plus a gather-heavy embedding lookup, compiled with TAPEJIT_BOUNDSCHECK=1 (the
default) and =0 in one process and timed in interleaved rounds (each round runs both, so load
from other jobs falls on both alike). Prints per workload the two medians and checked /
unchecked; the goal is <= 1.03x on each.

  embedding   grad of sum(tanh(E[tokens]) * w) w.r.t. E: 100,000 tokens into a 10,000 x 32
              table (a gather forward, a scatter-add backward: one checked index per row)
  lookup      grad of sum(x[idx] ** 2), 3 indices into 10 elements: the per-call cost (the
              status slot read after each call)

Only programs that index with traced indices have checks (gmm's `icf[:, tril_index]`, the
embedding); the others compile to the same source both ways, and are timed as the control.

    .venv/bin/python bench/boundscheck.py                      # every workload
    .venv/bin/python bench/boundscheck.py --workloads gmm,embedding --repeats 15
"""
from __future__ import annotations

import _harness as H  # first: pins the process (unless TAPEJIT_BENCH_CPUS=all)

import os  # noqa: E402

import numpy as np  # noqa: E402

import peers  # noqa: E402

GOAL = 1.03


def embedding(xp, table, tokens, w):
    return xp.sum(xp.tanh(table[tokens]) * w)


def lookup(xp, x, idx):
    return xp.sum(x[idx] ** 2)


def make_lookup() -> peers.Workload:
    x, idx = np.linspace(-1.0, 1.0, 10), np.array([1, 4, -1])
    return peers.Workload("lookup", "grad of sum(x[idx] ** 2), 3 of 10 elements", lookup,
                          [x, idx], (0,), None, "", tiny=True)


def make_embedding(quick: bool) -> peers.Workload:
    rng = np.random.default_rng(0)
    rows, width, count = (1000, 32, 10_000) if quick else (10_000, 32, 100_000)
    table = rng.normal(size=(rows, width))
    tokens = rng.integers(0, rows, size=count)
    w = rng.normal(size=width)
    return peers.Workload("embedding", f"grad of sum(tanh(E[tokens]) * w), {count:,} tokens "
                          f"into {rows:,} x {width}", embedding, [table, tokens, w], (0,),
                          None, "")


def compiled(w: peers.Workload, setting: str):
    """The workload's tapejit gradient, compiled with TAPEJIT_BOUNDSCHECK=`setting`, and
    whether its program checks indices."""
    import tapejit as tj
    from tapejit import config
    os.environ["TAPEJIT_BOUNDSCHECK"] = setting
    config.reload()
    grad, _, _ = peers.build_tapejit(w)
    grad()
    grad()                              # the second call compiles: the setting applies
    source = tj.explain(lambda *a: w.fn(np, *a), w.wrt)(*w.args).source
    return grad, "out of range" in source


def main() -> None:
    parser = H.make_parser(__doc__, repeats=11)
    parser.add_argument("--workloads", default="elementwise,dispatch,mlp,lennard_jones,gmm,"
                                                "embedding,lookup")
    args = H.parse_args(parser)
    H.print_header("bounds checks: TAPEJIT_BOUNDSCHECK=1 against =0", args)
    makers = {**peers.workloads(args.quick), "embedding": lambda: make_embedding(args.quick),
              "lookup": make_lookup}
    print("| workload | index checks | checked | unchecked | checked / unchecked |")
    print("|---|---|---|---|---|")
    ratios = {}
    for name in args.workloads.split(","):
        w = makers[name]()
        (checked, checks), (unchecked, none) = compiled(w, "1"), compiled(w, "0")
        assert not none, f"{name}: TAPEJIT_BOUNDSCHECK=0 left checks in the program"
        fns = {"1": checked, "0": unchecked}
        H.check_close(f"{name} gradient, checked against unchecked", fns["1"](), fns["0"](),
                      rtol=1e-12)
        timing = peers.interleaved(fns, args.repeats, 0.005 if w.tiny else 0.05)
        ratios[name] = timing["1"].median / timing["0"].median
        print(f"| {name} | {'yes' if checks else 'none'} | {H.fmt_time(timing['1'].median)} | "
              f"{H.fmt_time(timing['0'].median)} | {ratios[name]:.3f}x |", flush=True)
    for name, ratio in ratios.items():
        H.ratio_line(f"{name}: checked / unchecked", ratio, 1.0, goal=GOAL)


if __name__ == "__main__":
    main()
