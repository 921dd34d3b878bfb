"""A GradientTape training loop on the MLP of bench/mlp.py: time per step against the same step
written with tj.value_and_grad.

Both loops run plain SGD (lr 0.1) on the 64-256-256-10 tanh MLP's softmax cross-entropy over
1,797 samples, for 1,000 steps in all (--steps), timed as the median over --repeats runs of
steps/repeats steps each:
  - "GradientTape [numba]": parameters are tj.Variables; each step records the forward eagerly
    (numpy runs every op as it is recorded), then `tape.gradient` replays the compiled reverse
    sweep (compiled on the first step, looked up by the recorded structure after that);
  - the reference, "value_and_grad [numba]": one compiled forward + reverse program per step.
Both start from the same parameters and must agree after a few steps.
Goal: the tape step within 1.5x the value_and_grad step.

    .venv/bin/python bench/tape_loop.py [--steps 1000] [--repeats 5] [--quick [--with-numba]]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import numpy as np

import tapejit as tj
from mlp import QUICK_SAMPLES, QUICK_SIZES, N_SAMPLES, SIZES, init_params, loss, make_data

GOAL = 1.5
LR = 0.1


def tape_trainer(params, x, y, backend):
    variables = {k: tj.Variable(v, name=k) for k, v in params.items()}

    def step():
        with tj.GradientTape(backend=backend) as tape:
            value = loss(variables, x, y)
        grads = tape.gradient(value, variables)
        for k, v in variables.items():
            v.assign_sub(LR * grads[k])
        return value

    return step, variables


def value_and_grad_trainer(params, x, y, backend):
    vg = tj.value_and_grad(loss, backend=backend)
    state = {"params": dict(params)}

    def step():
        value, grads = vg(state["params"], x, y)
        state["params"] = {k: p - LR * grads[k] for k, p in state["params"].items()}
        return value

    return step, state


def main() -> None:
    parser = H.make_parser(__doc__, repeats=5)
    parser.add_argument("--steps", type=int, default=None, help="steps in all (default 1000)")
    args = H.parse_args(parser)
    sizes, n = (QUICK_SIZES, QUICK_SAMPLES) if args.quick else (SIZES, N_SAMPLES)
    steps = args.steps or (40 if args.quick else 1000)
    x, y, source = make_data(n, sizes)
    params = init_params(sizes)
    H.print_header("bench/tape_loop.py: GradientTape training loop vs value_and_grad", args,
                   extra=f"{'-'.join(map(str, sizes))} tanh MLP, {n} samples of {source}, "
                         f"{steps} SGD steps")
    backend = H.tapejit_variants(args)[0][1]["backend"]
    tape_step, variables = tape_trainer(params, x, y, backend)
    vg_step, state = value_and_grad_trainer(params, x, y, backend)
    for _ in range(3):                  # the first steps compile; both must follow one path
        tape_value, vg_value = float(tape_step()), float(vg_step())
    H.check_close("tape loss vs value_and_grad loss after 3 steps", tape_value, vg_value,
                  rtol=1e-10)
    H.check_close("tape parameters vs value_and_grad parameters",
                  {k: v.numpy() for k, v in variables.items()}, state["params"], rtol=1e-9,
                  atol=1e-12)
    before = tj.tape_cache_info(backend)
    per_run = max(1, steps // args.repeats)
    tape_label, ref_label = f"GradientTape [{backend}]", f"value_and_grad [{backend}]"
    table = H.Table(f"one SGD step, {'-'.join(map(str, sizes))} tanh MLP, {n} samples, float64",
                    ref=ref_label, ratio_name="x value_and_grad")
    table.add(tape_label, H.measure(tape_step, args.repeats, warmup=0, number=per_run),
              goal=f"<= {GOAL:.2f}x")
    table.add(ref_label, H.measure(vg_step, args.repeats, warmup=0, number=per_run))
    after = tj.tape_cache_info(backend)
    print(f"   tape programs during the timed steps: {after['traces'] - before['traces']} "
          f"derived, {after['compiles'] - before['compiles']} compiled, "
          f"{after['hits'] - before['hits']} replayed")
    table.print()
    H.ratio_line(f"{tape_label} / {ref_label}", table.seconds(tape_label),
                 table.seconds(ref_label), goal=GOAL,
                 record={"workload": "tape_loop", "row": tape_label, "reference": ref_label})


if __name__ == "__main__":
    main()
