"""Checkpointing: peak memory and time of a 100,000-step reverse sweep, storing every carry,
with k snapshots (`checkpoints=k`) and with Revolve's binomial schedule (`"binomial"`).

The loop: `h = h + dt * (tanh(w * h) - 0.1 h^3)` on a state of 256 floats, 100,000 steps,
`tj.grad` of `sum(h_T)` w.r.t. w, compiled with numba. A stored sweep keeps every carry
(100,000 x 2 KiB = 205 MB); k snapshots keep k carries plus a segment of n/k; binomial keeps
ceil(log2 n) + 2. Each row runs in a fresh process that measures its peak resident memory
during its first gradient call (the kernel's high-water mark, reset after compiling the same
program on a 2-step loop), so numba's own allocations are counted. All rows give the same
gradient (checked).

    .venv/bin/python bench/checkpoint.py [--steps 100000] [--width 256] [--repeats 3] [--quick]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import json
import os
import subprocess
import sys

import numpy as np

import tapejit as tj
from tapejit.control.checkpointing import binomial_snapshots, policy_segment

POLICIES = [None, 316, 100, "binomial"]


def make_loss(steps: int, checkpoints):
    def loss(w):
        h = tj.fori_loop(0, steps, lambda i, h: h + 0.01 * (np.tanh(w * h) - 0.1 * h ** 3),
                         np.ones(w.shape[0]), checkpoints=checkpoints)
        return np.sum(h)
    return loss


def kept_carries(steps: int, checkpoints) -> int:
    """Carries the reverse sweep keeps at once (tapejit/control/checkpointing.py's policies)."""
    if checkpoints is None:
        return steps
    if checkpoints == "binomial":
        return binomial_snapshots(steps) + 1
    seg = policy_segment(steps, checkpoints)
    return -(-steps // seg) + seg


def _rss(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(steps: int, width: int, policy, repeats: int) -> None:
    """In a fresh process: compile on a 2-step loop (the same program), then the peak RSS of
    the first call for `steps` steps, then its time over `repeats` calls."""
    w = np.linspace(0.5, 1.5, width)
    tj.grad(make_loss(2, policy), backend="numba")(w)
    with open("/proc/self/clear_refs", "w") as fh:   # reset the high-water mark
        fh.write("5")
    before = _rss("VmRSS")
    g = tj.grad(make_loss(steps, policy), backend="numba")
    grad = g(w)
    peak = _rss("VmHWM") - before
    times = H.measure(lambda: g(w), repeats, warmup=0)
    print(json.dumps({"runs": times.runs, "peak": peak, "grad": grad.tolist()}))


def run_child(steps: int, width: int, policy, repeats: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps(policy),
                          "--steps", str(steps), "--width", str(width),
                          "--repeats", str(repeats)],
                         capture_output=True, text=True, check=True, env=dict(os.environ))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = H.make_parser(__doc__, repeats=3)
    parser.add_argument("--steps", type=int, default=None, help="loop steps (default 100,000)")
    parser.add_argument("--width", type=int, default=256, help="floats in the state")
    parser.add_argument("--child", default=None, help=argparse_hidden())
    args = H.parse_args(parser)
    steps = args.steps or (5_000 if args.quick else 100_000)
    if args.child is not None:
        child(steps, args.width, json.loads(args.child), args.repeats)
        return
    H.print_header("bench/checkpoint.py: reverse sweep memory and time", args,
                   rows="tapejit [numba], one process per policy",
                   extra=f"{steps:,} steps, state of {args.width} floats")
    results = {}
    policies = [None, "binomial"] if args.quick else POLICIES
    for policy in policies:
        results[policy] = r = run_child(steps, args.width, policy, args.repeats)
        r["timing"] = H.Timing.of(r["runs"])
        H.check_close(f"checkpoints={policy!r} gradient vs stored", np.array(r["grad"]),
                      np.array(results[None]["grad"]), rtol=1e-12)
    table = H.Table(f"gradient of a {steps:,}-step loop, float64[{args.width}] carry",
                    ref="checkpoints=None", ratio_name="time x stored")
    carry = args.width * 8
    for policy, r in results.items():
        kept = kept_carries(steps, policy)
        table.add(f"checkpoints={policy!r}", r["timing"],
                  note=f"peak +{r['peak'] / 1e6:.2f} MB; keeps {kept:,} carries "
                       f"({kept * carry / 1e6:.2f} MB)")
    table.print()
    stored = results[None]["peak"]
    for policy in policies[1:]:
        H.ratio_line(f"peak memory checkpoints={policy!r} / stored", results[policy]["peak"],
                     stored)
        H.ratio_line(f"time checkpoints={policy!r} / stored", results[policy]["timing"].median,
                     results[None]["timing"].median)


def argparse_hidden() -> str:
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    main()
