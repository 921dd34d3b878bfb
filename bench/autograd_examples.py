"""HIPS autograd's example programs, run unchanged under HIPS autograd and under tapejit.

    python bench/autograd_examples.py --examples /tmp/autograd-src/examples [--only gmm,ica]

Each of the 29 programs of autograd's `examples/` folder (EXAMPLES) runs twice, each time in a
fresh process: under HIPS autograd, and under tapejit through the shim in `autograd_shim/`
(a package named `autograd` put first on sys.path: `autograd.numpy` is numpy, `grad` and the
other operators are tapejit's transforms, the optimizers keep autograd's arithmetic). Both
runs get the same stubs (`autograd_shim/stubs/`): matplotlib does nothing (but read PNGs),
MNIST is synthetic data of the same shapes (no download). Each gradient evaluation records
the objective's value, so "final objective" is the one at the last gradient call, on both
sides. Examples that take over 120 s under autograd run with fewer iterations on both sides
(REDUCED: a text substitution in memory; `--as-published` turns it off); the table says so.

Prints, per example: ran or the error (its first line and the line of the example it names),
final objective both ways and their relative difference, wall time both ways (the script's
run, imports of autograd/tapejit included; the interpreter's start excluded; with `--repeats
N`, examples under SHORT_S on both sides run N times on each side, interleaved, and give
medians), and tapejit's compiles (count, total and longest time, from the `tapejit` logger at
TAPEJIT_LOG=info) and traces (cache_info of every transform the shim made). Then a markdown
table and ratio lines.
Both libraries (tapejit, the shim, HIPS autograd) are byte-compiled first, as `pip install`
leaves them: an environment with PYTHONDONTWRITEBYTECODE set would otherwise compile
tapejit's modules from source in every run (0.29 s against 0.11 s for `import tapejit`).
The examples' code is not part of tapejit: get it outside the repository (bench/README.md).

Default threading, as users run the examples: unless TAPEJIT_BENCH_CPUS is set, this script
sets it to "all" before importing the harness (no CPU pin: numpy's BLAS under autograd, and
tapejit's threads and background compiles, get every core).
"""
from __future__ import annotations

import os

os.environ.setdefault("TAPEJIT_BENCH_CPUS", "all")   # the harness reads it on import

import _harness  # noqa: E402,F401  (the CPU setting; see README)

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
SHIM = HERE / "autograd_shim"
STUBS = SHIM / "stubs"
ENV_EXAMPLES = "AUTOGRAD_EXAMPLES"
MARK = "@@autograd_examples "

EXAMPLES = [
    "bayesian_neural_net", "bayesian_optimization", "black_box_svi", "convnet",
    "deep_gaussian_process", "define_gradient", "fixed_points", "gaussian_process",
    "generative_adversarial_net", "gmm", "gplvm", "hmm_em", "ica", "logistic_regression",
    "lstm", "mixture_variational_inference", "natural_gradient_black_box_svi",
    "negative_binomial_maxlike", "neural_net", "neural_net_regression", "ode_net", "rkhs",
    "rnn", "rosenbrock", "sinusoid", "tanh", "variational_autoencoder", "fluidsim/fluidsim",
    "fluidsim/wing",
]
# example -> (what changed, [(text, replacement)]): examples over 120 s under autograd (wall
# time on the shared 2-core machine: lstm, mixture_variational_inference, hmm_em,
# variational_autoencoder, ode_net, fluidsim and wing ran past 200 s, gplvm past 150 s, neural_net
# took 145 s, convnet's first epoch past 240 s)
REDUCED: dict[str, tuple[str, list[tuple[str, str]]]] = {
    "convnet": ("20 batches of 1 epoch (of 50 epochs); errors on 1,000 images", [
        ("num_epochs = 50", "num_epochs = 1"), ("in batch_idxs:", "in batch_idxs[:20]:"),
        ("(W, test_images, test_labels)", "(W, test_images[:1000], test_labels[:1000])"),
        ("(W, train_images, train_labels)", "(W, train_images[:1000], train_labels[:1000])")]),
    "generative_adversarial_net": ("1 epoch of 50", [("num_epochs = 50", "num_epochs = 1")]),
    "lstm": ("200 Adam steps of 1,000", [("num_iters=1000,", "num_iters=200,")]),
    "rnn": ("200 Adam steps of 1,000", [("num_iters=1000,", "num_iters=200,")]),
    "mixture_variational_inference": ("200 Adam steps of 2,000", [
        ("num_iters=2000,", "num_iters=200,")]),
    "neural_net": ("1 epoch of 5", [("num_epochs = 5", "num_epochs = 1")]),
    "variational_autoencoder": ("1 epoch of 15", [("num_epochs = 15", "num_epochs = 1")]),
    "ode_net": ("100 Adam steps of 1,000", [("num_iters=1000,", "num_iters=100,")]),
    "fluidsim/fluidsim": ("5 CG iterations of 25", [('"maxiter": 25', '"maxiter": 5')]),
    "fluidsim/wing": ("10 CG iterations of 50", [('"maxiter": 50', '"maxiter": 10')]),
    "hmm_em": ("at most 10 EM steps (of: until converged)", [
        ("while different(x0, x1):", "for _ in range(10):\n"
         "            if not different(x0, x1):\n                break")]),
    "deep_gaussian_process": ("CG stopped after 200 iterations", [
        ('method="CG", callback=callback)', 'method="CG", callback=callback, '
         'options={"maxiter": 200})')]),
    "gplvm": ("CG stopped after 200 iterations", [
        ('method="CG", callback=callback)', 'method="CG", callback=callback, '
         'options={"maxiter": 200})')]),
}
MNIST = {"convnet", "generative_adversarial_net", "neural_net", "variational_autoencoder"}
SHORT_S = 2.0     # examples this short on both sides run `--repeats` times each (`repeated`)


# -- the child: one example, one library -------------------------------------------------------
def child(mode: str, path: Path, reduced: bool) -> None:
    """Run the example at `path` as __main__ and print one MARK line with what happened."""
    sys.path[:0] = [str(STUBS)] + ([str(SHIM)] if mode == "tapejit" else []) + [str(path.parent)]
    del sys.path[sys.path.index(str(HERE))]
    import numpy as np
    import shim_record
    compiles: list[float] = []
    np.random.seed(0)        # the examples that draw from numpy's global state: same draws,
    np.random.RandomState = _seeded()    # and from an unseeded RandomState() too
    if mode == "tapejit":
        _listen_to_compiles(compiles)    # (the harness's logging: not tapejit's time)
    start, cpu = time.perf_counter(), time.process_time()   # the library's import counts too
    import autograd
    if mode == "autograd":
        shim_record.wrap_autograd(autograd)
    source = path.read_text()
    for old, new in (REDUCED.get(_name(path), ("", []))[1] if reduced else []):
        source = source.replace(old, new)
    result: dict = {"ok": True}
    try:
        code = compile(source, str(path), "exec")
        exec(code, {"__name__": "__main__", "__file__": str(path)})
    except BaseException as err:  # noqa: BLE001  (the example's own failure is the result)
        result = {"ok": False, "error": _first_line(err), "where": _where(err, path)}
    result["wall_s"] = time.perf_counter() - start
    result["cpu_s"] = time.process_time() - cpu
    result.update(objective=shim_record.LAST["objective"],
                  grad_calls=shim_record.LAST["grad_calls"],
                  compiles=len(compiles), compile_s=sum(compiles),
                  compile_max_s=max(compiles, default=0.0), **_cache_counts(shim_record))
    sys.stdout.flush()
    print("\n" + MARK + json.dumps(result), flush=True)


def _seeded():
    import numpy as np

    class Seeded(np.random.RandomState):
        """numpy's RandomState, seeded with 0 where the example gives no seed."""

        def __init__(self, seed=None):
            super().__init__(0 if seed is None else seed)
    return Seeded


def _name(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}" if path.parent.name == "fluidsim" else path.stem


def _listen_to_compiles(seconds: list[float]) -> None:
    """Collect each compile's (or disk load's) time from the `tapejit` logger."""
    import logging
    import re

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            found = re.search(r"^tapejit: compiled .* in ([0-9.]+) s$", record.getMessage())
            if found:
                seconds.append(float(found.group(1)))
    logger = logging.getLogger("tapejit")
    logger.addHandler(Collect())
    logger.setLevel(logging.INFO)


def _cache_counts(shim_record) -> dict:
    keys = ("traces", "compiles", "disk_loads", "programs")
    total = dict.fromkeys(keys, 0)
    for transform in shim_record.TRANSFORMS:
        info = getattr(transform, "cache_info", None)
        for key in keys if info else ():
            total[key] += info().get(key, 0)
    return {f"cache_{k}": v for k, v in total.items()}


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:200]


def _where(err: BaseException, path: Path) -> str:
    """The line the error names ('at file:line' in a tapejit error), else the deepest frame
    in the examples' folder."""
    for line in reversed(str(err).splitlines()):
        if line.strip().startswith("at "):
            return line.strip()[3:]
    import traceback
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if f.filename.startswith(str(path.parent.parent))]
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""


# -- the parent --------------------------------------------------------------------------------
def run_one(name: str, mode: str, examples: Path, reduced: bool, timeout: float,
            extra_env: dict | None = None) -> dict:
    """One example in a fresh process (cwd: a temporary folder, for the files it writes)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", MPLBACKEND="Agg", **(extra_env or {}))
    if mode == "tapejit":
        env["TAPEJIT_LOG"] = "info"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", mode,
           str(examples / f"{name}.py")] + (["--as-published"] if not reduced else [])
    with tempfile.TemporaryDirectory() as cwd:
        try:
            done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"still running after {timeout:.0f} s", "where": "",
                    "wall_s": None, "objective": None}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"ok": False, "error": f"process died (rc {done.returncode}): {tail}"[:200],
            "where": "", "wall_s": None, "objective": None}


def repeated(name: str, first: dict[str, dict], examples: Path, reduced: bool, timeout: float,
             repeats: int) -> dict[str, dict]:
    """The first run of an example on each side that ran it (`first`: mode -> result), with
    the median wall and CPU times of `repeats` runs, interleaved: a 20 ms script's single run
    moves by half with the machine's load. tapejit's later runs each get a fresh cache
    directory (the example's programs new to them, as to the first run) and the first run's
    library of kernels."""
    from tapejit.config import config
    library = {"TAPEJIT_LIBRARY_DIR": str(config().library_dir or config().cache_dir)}
    runs = {mode: [result] for mode, result in first.items()}
    for _ in range(repeats - 1):
        for mode, made in runs.items():
            with tempfile.TemporaryDirectory() as cache:
                extra = dict(library, TAPEJIT_CACHE_DIR=cache) if mode == "tapejit" else {}
                made.append(run_one(name, mode, examples, reduced, timeout, extra))
    medians = {}
    for mode, made in runs.items():
        done = [r for r in made if r["ok"]]
        medians[mode] = dict(made[0], runs=len(done),
                             wall_s=statistics.median(r["wall_s"] for r in done),
                             cpu_s=statistics.median(r["cpu_s"] for r in done))
    return medians


def byte_compile() -> None:
    """Write the bytecode of both libraries' modules (py_compile writes it whatever
    PYTHONDONTWRITEBYTECODE says), so that no timed import compiles source."""
    import compileall
    import importlib.util

    for name in ("tapejit", "autograd"):           # (HIPS autograd: where it is installed)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            compileall.compile_dir(os.path.dirname(spec.origin), quiet=1)
    compileall.compile_dir(str(SHIM), quiet=1)


def rel_diff(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(rows: list[tuple[str, dict, dict]], reduced: bool) -> str:
    lines = ["| example | autograd | tapejit | final objective (autograd / tapejit) | rel. diff "
             "| wall s (autograd / tapejit) | ratio | CPU s (autograd / tapejit) "
             "| compiles (total / longest s) | note |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, ag, tj in rows:
        ratio = (tj["wall_s"] / ag["wall_s"] if ag["ok"] and tj["ok"] else None)
        notes = [REDUCED[name][0]] if reduced and name in REDUCED else []
        notes += ["synthetic MNIST"] if name in MNIST else []
        notes += [f"median of {tj['runs']} runs"] if tj.get("runs", 1) > 1 else []
        lines.append(
            f"| {name} | {_status(ag)} | {_status(tj)} | {fmt(ag.get('objective'), '.10g')} / "
            f"{fmt(tj.get('objective'), '.10g')} | "
            f"{fmt(rel_diff(ag.get('objective'), tj.get('objective')), '.1e')} | "
            f"{fmt(ag.get('wall_s'), '.2f')} / {fmt(tj.get('wall_s'), '.2f')} | "
            f"{fmt(ratio, '.2f')} | {fmt(ag.get('cpu_s'), '.2f')} / "
            f"{fmt(tj.get('cpu_s'), '.2f')} | {tj.get('compiles', '-')} ({fmt(tj.get('compile_s'), '.1f')}"
            f" / {fmt(tj.get('compile_max_s'), '.1f')}) | {'; '.join(notes)} |")
    return "\n".join(lines)


def _status(result: dict) -> str:
    if result["ok"]:
        return "ran"
    where = f" ({result['where']})" if result.get("where") else ""
    return f"error: {result['error']}{where}".replace("|", "\\|")


def summary(rows: list[tuple[str, dict, dict]]) -> None:
    both = [(ag, tj) for _, ag, tj in rows if ag["ok"] and tj["ok"]]
    equal = [1 for ag, tj in both if (rel_diff(ag["objective"], tj["objective"]) or 0) <= 1e-6]
    print(f"\nran under tapejit: {sum(tj['ok'] for _, _, tj in rows)} of {len(rows)}; under "
          f"autograd: {sum(ag['ok'] for _, ag, _ in rows)}; both: {len(both)}, final objective "
          f"within 1e-6: {len(equal)}; longest compile "
          f"{max((tj.get('compile_max_s') or 0 for _, _, tj in rows), default=0):.1f} s")
    _harness.ratio_line("tapejit / autograd, total wall time of the examples run by both",
                        sum(tj["wall_s"] for _, tj in both) if both else None,
                        sum(ag["wall_s"] for ag, _ in both) if both else None, goal=0.5)
    worst = max((tj["wall_s"] / ag["wall_s"] for ag, tj in both), default=None)
    _harness.ratio_line("tapejit / autograd, wall time of the slowest example (worst ratio)",
                        worst, 1.0 if worst is not None else None, goal=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", default=os.environ.get(ENV_EXAMPLES),
                        help=f"folder of autograd's examples (default: ${ENV_EXAMPLES})")
    parser.add_argument("--only", default="", help="comma-separated example names")
    parser.add_argument("--mode", choices=("both", "autograd", "tapejit"), default="both")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    parser.add_argument("--as-published", action="store_true",
                        help="run every example with its published iteration counts")
    parser.add_argument("--markdown", help="also write the table to this file (run_all.py)")
    parser.add_argument("--repeats", type=int, default=1,
                        help=f"runs on each side of the examples under {SHORT_S:g} s (medians)")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], Path(args.child[1]), not args.as_published)
    if not args.examples:
        parser.error(f"give --examples DIR or set ${ENV_EXAMPLES} (see bench/README.md)")
    examples = Path(args.examples).resolve()
    names = [n for n in args.only.split(",") if n] or EXAMPLES
    if not args.only:
        names = [n for n in EXAMPLES if (examples / f"{n}.py").exists()]
    _harness.print_header("HIPS autograd's examples: autograd against tapejit")
    byte_compile()
    skipped = {"ok": False, "error": "not run (--mode)", "where": "", "wall_s": None,
               "objective": None}
    rows = []
    for name in names:
        ag, tj = [run_one(name, m, examples, not args.as_published, args.timeout)
                  if args.mode in ("both", m) else skipped for m in ("autograd", "tapejit")]
        ran = {mode: r for mode, r in (("autograd", ag), ("tapejit", tj)) if r["ok"]}
        if args.repeats > 1 and ran and max(r["wall_s"] for r in ran.values()) < SHORT_S:
            ran = repeated(name, ran, examples, not args.as_published, args.timeout,
                           args.repeats)
            ag, tj = ran.get("autograd", ag), ran.get("tapejit", tj)
        print(f"{name}: autograd {_status(ag)} {fmt(ag.get('wall_s'), '.2f')} s, objective "
              f"{fmt(ag.get('objective'), '.10g')}; tapejit {_status(tj)} "
              f"{fmt(tj.get('wall_s'), '.2f')} s, objective {fmt(tj.get('objective'), '.10g')}, "
              f"{tj.get('compiles', '-')} compiles {fmt(tj.get('compile_s'), '.1f')} s, "
              f"{tj.get('cache_traces', '-')} traces", flush=True)
        rows.append((name, ag, tj))
    made = table(rows, not args.as_published)
    print("\n" + made)
    if args.markdown:
        Path(args.markdown).write_text(made + "\n")
    summary(rows)


if __name__ == "__main__":
    main()
