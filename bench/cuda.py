"""The CUDA backend on a GPU: the zoo's correctness on the device, then the elementwise gradient
(bench/elementwise.py's `f`, 10^8 elements) and the MLP training-step gradient (bench/mlp.py's
`loss`, batch 65,536) with `backend="cuda"` on device-resident arrays, each against the
device's copy bandwidth (a device-to-device copy of the same array).

Bandwidth of a row = the bytes it must move at least (inputs read once, outputs written once)
over its median time; the copy row moves 2 x its array. Exits with a message, and status 0,
where the CUDA backend cannot run (no numba-cuda, or no GPU).

    .venv/bin/python bench/cuda.py [--n 100000000] [--batch 65536] [--repeats 9]

`--peers` prints issue 24's table instead: the gradients of elementwise (10^8, float32 and
float64), the 64-256-256-10 MLP (batch 65,536, float32 and float64) and Lennard-Jones
(N = 13^3 = 2,197, float64) with tapejit's CUDA backend, JAX `jit(grad)` (highest matmul
precision: no TF32) and PyTorch eager (and `torch.compile` on elementwise float32) where
installed with a GPU; device-resident inputs, medians of --repeats calls (7). Each peer runs
each workload in a new process of its own, which checks its gradient against the hand-written
numpy one (bench/elementwise.py, mlp.py, lennard_jones.py) and times its first call; tapejit
runs twice, on a fresh TAPEJIT_CACHE_DIR and then on the same one (its kernels cached on disk).

    .venv/bin/python bench/cuda.py --peers [--repeats 7] [--timeout 120] [--budget S] [--quick]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

import tapejit as tj  # noqa: E402
from tapejit import cuda_support  # noqa: E402


def timed(fn, repeats: int) -> float:
    """Median seconds of `fn()` (after one warm-up), synchronising the device each time."""
    cuda = cuda_support.numba_cuda()
    fn()
    cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def row(name: str, seconds: float, nbytes: float, copy_gbs: float | None = None) -> float:
    gbs = nbytes / seconds / 1e9
    share = f"  {gbs / copy_gbs:5.0%} of copy" if copy_gbs else ""
    print(f"{name:<44} {seconds * 1e3:9.3f} ms  {gbs:8.1f} GB/s{share}", flush=True)
    return gbs


def copy_bandwidth(n: int, dtype, repeats: int) -> float:
    cuda = cuda_support.numba_cuda()
    a = cuda.to_device(np.ones(n, dtype))
    b = cuda.device_array_like(a)
    return row(f"device copy {np.dtype(dtype).name}[{n}]", timed(lambda: b.copy_to_device(a),
                                                                 repeats), 2 * a.nbytes)


def elementwise(n: int, dtype, repeats: int, copy_gbs: float) -> None:
    cuda = cuda_support.numba_cuda()
    from elementwise import f, numpy_grad
    x_host = np.random.default_rng(0).uniform(-2, 2, n).astype(dtype)
    x = cuda.to_device(x_host)
    grad = tj.grad(f, backend="cuda")
    start = time.perf_counter()
    g = grad(x)
    cuda.synchronize()
    print(f"  first call (trace + kernel compile): {time.perf_counter() - start:.2f} s")
    check = slice(0, min(n, 1_000_000))
    tol = 1e-4 if dtype == np.float32 else 1e-10
    np.testing.assert_allclose(g.copy_to_host()[check], numpy_grad(x_host[check]), rtol=tol,
                               atol=tol)
    row(f"grad elementwise {np.dtype(dtype).name}[{n}]", timed(lambda: grad(x), repeats),
        2 * x.nbytes, copy_gbs)


def mlp(batch: int, repeats: int, copy_gbs: float) -> None:
    cuda = cuda_support.numba_cuda()
    from mlp import init_params, loss, make_data
    params = init_params()
    x, y, _ = make_data(batch, digits=False)
    step = tj.value_and_grad(loss, backend="cuda")
    want = tj.value_and_grad(loss, backend="numba")(params, x, y)[0]
    d_params = {k: cuda.to_device(v) for k, v in params.items()}
    d_x, d_y = cuda.to_device(x), cuda.to_device(y)
    start = time.perf_counter()
    value, _ = step(d_params, d_x, d_y)
    print(f"  first call (trace + kernel compile): {time.perf_counter() - start:.2f} s")
    np.testing.assert_allclose(value, want, rtol=1e-9)
    nbytes = x.nbytes + y.nbytes + 2 * sum(v.nbytes for v in params.values())
    row(f"mlp value_and_grad batch {batch}", timed(lambda: step(d_params, d_x, d_y), repeats),
        nbytes, copy_gbs)


# ---- --peers: issue 24's table ------------------------------------------------------------

PEERS = {"tapejit": "tapejit cuda", "jax": "JAX", "torch": "torch eager",
         "torch.compile": "torch.compile"}
MARK = "RESULT "
CHECK = 1_000_000          # elementwise: the elements checked against numpy
GOALS = {"elementwise": 1.0, "mlp": 1.2, "lj": 1.5}    # tapejit / JAX, at most
FIRST_CALL_GOAL = 0.5      # seconds, the MLP in a new process with a warm cache


def workloads(args: argparse.Namespace) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    """name -> (row label, dtype name, peers)."""
    n, b, atoms = args.n, args.batch, args.side ** 3
    every = ("tapejit", "jax", "torch")
    return {"elementwise-f32": (f"elementwise {n:,} float32", "float32",
                                every + ("torch.compile",)),
            "elementwise-f64": (f"elementwise {n:,} float64", "float64", every),
            "mlp-f32": (f"MLP 64-256-256-10, batch {b:,}, float32", "float32", every),
            "mlp-f64": (f"MLP 64-256-256-10, batch {b:,}, float64", "float64", every),
            "lj-f64": (f"Lennard-Jones N={atoms:,}, float64", "float64", every)}


def inputs(name: str, args: argparse.Namespace) -> list[np.ndarray]:
    """The host inputs of workload `name` (the same in every process)."""
    dtype = np.dtype(name.split("-")[1].replace("f", "float"))
    if name.startswith("elementwise"):
        return [np.random.default_rng(0).uniform(-2, 2, args.n).astype(dtype)]
    if name.startswith("mlp"):
        from mlp import init_params, make_data
        params = init_params()
        x, y, _ = make_data(args.batch, digits=False)
        return [params[k].astype(dtype) for k in ("w1", "b1", "w2", "b2", "w3", "b3")] + \
            [x.astype(dtype), y.astype(dtype)]
    from lennard_jones import positions
    x = positions(args.side)
    return [x, np.eye(len(x), dtype=bool)]


def reference(name: str, args: argparse.Namespace) -> list[np.ndarray]:
    """The hand-written numpy gradient, in float64 (elementwise: of the first CHECK elements)."""
    host = [np.asarray(a, np.float64) if a.dtype.kind == "f" else a for a in inputs(name, args)]
    if name.startswith("elementwise"):
        from elementwise import numpy_grad
        return [numpy_grad(host[0][:CHECK])]
    if name.startswith("mlp"):
        from mlp import numpy_value_and_grad
        params = dict(zip(("w1", "b1", "w2", "b2", "w3", "b3"), host[:6]))
        grads = numpy_value_and_grad(params, host[6], host[7])[1]
        return [grads[k] for k in ("w1", "b1", "w2", "b2", "w3", "b3")]
    from lennard_jones import numpy_value_and_grad
    return [numpy_value_and_grad(host[0])[1]]


def wrt(name: str) -> tuple[int, ...]:
    return tuple(range(6)) if name.startswith("mlp") else (0,)


def peer_fn(name: str, xp):
    """Workload `name` written against the array module `xp` (bench/peers.py's)."""
    from peers import elementwise, lennard_jones, mlp
    fn = {"elementwise": elementwise, "mlp": mlp, "lj": lennard_jones}[name.split("-")[0]]
    return lambda *a: fn(xp, *a)


def build(peer: str, name: str, host: list[np.ndarray]):
    """(grad() on device-resident inputs, wait(its result), to_host(its result) -> a list of
    numpy arrays)."""
    if peer == "tapejit":
        cuda = cuda_support.numba_cuda()
        args = [cuda.to_device(a) for a in host]
        g = tj.grad(peer_fn(name, np), argnums=wrt(name), backend="cuda")
        return (lambda: g(*args)), lambda out: cuda.synchronize(), lambda out: [
            o.copy_to_host() for o in (out if isinstance(out, tuple) else (out,))]
    if peer == "jax":
        import jax
        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_default_matmul_precision", "highest")
        device = jax.devices("gpu")[0]
        args = [jax.device_put(a, device) for a in host]
        g = jax.jit(jax.grad(peer_fn(name, jax.numpy), argnums=wrt(name)))
        return (lambda: g(*args)), jax.block_until_ready, lambda out: [np.asarray(o) for o in out]
    import torch
    from peers import TorchNP
    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device for torch")
    torch.backends.cuda.matmul.allow_tf32 = False
    args = [torch.from_numpy(np.ascontiguousarray(a)).cuda() for a in host]
    for i in wrt(name):
        args[i].requires_grad_(True)
    f = peer_fn(name, TorchNP(torch))
    f = torch.compile(f) if peer == "torch.compile" else f
    return (lambda: torch.autograd.grad(f(*args), [args[i] for i in wrt(name)])), \
        lambda out: torch.cuda.synchronize(), lambda out: [o.detach().cpu().numpy() for o in out]


def child(args: argparse.Namespace) -> None:
    """One peer on one workload in this (new) process: prints MARK + JSON."""
    name, peer = args.child
    result: dict = {"workload": name, "peer": peer}
    try:
        host = inputs(name, args)
        want = [np.load(args.ref)[f"g{k}"] for k in range(len(wrt(name)))]
        call, wait, to_host = build(peer, name, host)
        start = time.perf_counter()
        out = call()
        wait(out)
        result["first_s"] = time.perf_counter() - start
        got = to_host(out)
        if name.startswith("elementwise"):
            got = [got[0][:CHECK]]
        scale = max(float(np.max(np.abs(w))) for w in want)
        err = max(float(np.max(np.abs(np.asarray(g, np.float64) - w))) for g, w in zip(got, want))
        result["error"] = err / scale
        tol = 1e-9 if name.endswith("f64") else 2e-3
        if not err <= tol * scale:
            raise AssertionError(f"gradient off by {err / scale:.2e} of its largest element")
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            wait(call())
            times.append(time.perf_counter() - start)
        result["median_s"] = statistics.median(times)
    except ImportError as err:
        result["skip"] = f"not installed ({err.name})"
    except Exception as err:     # reported in the table, not fatal for the others
        result["failed"] = f"{type(err).__name__}: {err}"[:200]
    print(MARK + json.dumps(result), flush=True)


def run_child(name: str, peer: str, args: argparse.Namespace, ref: str, cache: str) -> dict:
    argv = [sys.executable, __file__, "--child", name, peer, "--ref", ref,
            "--repeats", str(args.repeats), "--n", str(args.n), "--batch", str(args.batch),
            "--side", str(args.side)]
    env = dict(os.environ, TAPEJIT_CACHE_DIR=cache, TAPEJIT_BENCH_CPUS="all")
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True,
                              timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"workload": name, "peer": peer, "failed": f"over {args.timeout} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"workload": name, "peer": peer, "failed": f"exit {proc.returncode}: {tail[0]}"[:200]}


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 10 else f"{seconds:.1f} s"


def cell(row: dict | None, key: str) -> str:
    if row is None:
        return "–"
    if key in row:
        return ms(row[key]) if key == "median_s" else f"{row[key]:.2f} s"
    return row.get("skip") or ("failed" if "failed" in row else "–")


def table(rows: list[dict], labels: dict[str, str]) -> list[str]:
    """The Markdown tables of `rows` (child results; tapejit's warm-cache run as peer
    "tapejit warm"), then one line per goal and the failures."""
    by = {(r["workload"], r["peer"]): r for r in rows}
    head = "| gradient | " + " | ".join(PEERS.values()) + " |"
    lines = [head, "|---" * (len(PEERS) + 1) + "|"]
    for name, label in labels.items():
        lines.append(f"| {label} | " + " | ".join(cell(by.get((name, p)), "median_s")
                                                for p in PEERS) + " |")
    firsts = ["tapejit", "tapejit warm"] + list(PEERS)[1:]
    lines += ["", "First call in a new process (tapejit: fresh cache, then warm cache):", "",
              "| gradient | " + " | ".join(["tapejit", "tapejit warm cache"]
                                           + list(PEERS.values())[1:]) + " |",
              "|---" * (len(firsts) + 1) + "|"]
    for name, label in labels.items():
        lines.append(f"| {label} | " + " | ".join(cell(by.get((name, p)), "first_s")
                                                for p in firsts) + " |")
    lines.append("")
    for name, label in labels.items():
        ours, jax = by.get((name, "tapejit"), {}), by.get((name, "jax"), {})
        goal = GOALS[name.split("-")[0]]
        if "median_s" in ours and "median_s" in jax:
            ratio = ours["median_s"] / jax["median_s"]
            verdict = "met" if ratio <= goal else "NOT met"
            lines.append(f"goal {label}: tapejit / JAX = {ratio:.2f}x (<= {goal}x): {verdict}")
        if name.startswith("mlp") and "first_s" in by.get((name, "tapejit warm"), {}):
            first = by[(name, "tapejit warm")]["first_s"]
            verdict = "met" if first <= FIRST_CALL_GOAL else "NOT met"
            lines.append(f"goal {label}: first call, warm cache = {first:.2f} s "
                         f"(<= {FIRST_CALL_GOAL} s): {verdict}")
    lines += [f"failed {r['workload']} {r['peer']}: {r['failed']}" for r in rows
              if "failed" in r]
    return lines


def peers(args: argparse.Namespace) -> int:
    reason = cuda_support.problem()
    if reason is not None or cuda_support.cuda_status().startswith("the numba CUDA simulator"):
        print(f"bench/cuda.py --peers needs a GPU: {reason or 'the simulator is on'}")
        return 0
    print(f"device: {cuda_support.cuda_status()}; products: {cuda_support.products()}; medians "
          f"of {args.repeats}", flush=True)
    chosen = workloads(args)
    rows: list[dict] = []
    end = time.monotonic() + (args.budget or math.inf)
    with tempfile.TemporaryDirectory() as tmp:
        cache = str(Path(tmp) / "cache")
        for name, (_, _, names) in chosen.items():
            ref = str(Path(tmp) / f"{name}.npz")
            np.savez(ref, **{f"g{k}": g for k, g in enumerate(reference(name, args))})
            for peer in names:
                if time.monotonic() > end:
                    rows.append({"workload": name, "peer": peer, "skip": "over --budget"})
                    continue
                rows.append(run_child(name, peer, args, ref, cache))
                print(f"  {name} {peer}: {rows[-1]}", flush=True)
                if peer == "tapejit":
                    warm = run_child(name, peer, args, ref, cache)
                    rows.append(dict(warm, peer="tapejit warm"))
    print()
    for line in table(rows, {name: label for name, (label, _, _) in chosen.items()}):
        print(line)
    return 1 if any("failed" in r and r["peer"].startswith("tapejit") for r in rows) else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000_000)
    p.add_argument("--batch", type=int, default=65_536)
    p.add_argument("--side", type=int, default=13, help="Lennard-Jones: side**3 atoms")
    p.add_argument("--repeats", type=int, default=None, help="9, or 7 with --peers")
    p.add_argument("--peers", action="store_true", help="issue 24's table against JAX, torch")
    p.add_argument("--quick", action="store_true", help="--peers at 1/100 the sizes")
    p.add_argument("--timeout", type=int, default=120, help="seconds per peer and workload")
    p.add_argument("--budget", type=int, default=None,
                   help="--peers: start no peer after this many seconds")
    p.add_argument("--child", nargs=2, metavar=("WORKLOAD", "PEER"), help=argparse.SUPPRESS)
    p.add_argument("--ref", help=argparse.SUPPRESS)
    return p


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    args = parser().parse_args(argv)
    if args.repeats is None:
        args.repeats = 7 if args.peers or args.child else 9
    if args.quick:
        args.n, args.batch, args.side = args.n // 100, args.batch // 64, max(2, args.side // 2)
    if args.peers and args.child:
        raise SystemExit("--peers and --child exclude each other")
    if min(args.n, args.batch, args.side, args.repeats) < 1:
        raise SystemExit("--n, --batch, --side and --repeats must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        child(args)
        return 0
    if args.peers:
        return peers(args)
    reason = cuda_support.problem()
    if reason is not None or cuda_support.cuda_status().startswith("the numba CUDA simulator"):
        print(f"bench/cuda.py needs a GPU: {reason or 'the simulator is on'}")
        return 0
    print(f"device: {cuda_support.cuda_status()}; products: {cuda_support.products()}")
    from cuda_check import run_values
    if run_values(on_device=True):
        print("zoo: FAILED on the device")
        return 1
    for dtype in (np.float32, np.float64):
        copy_gbs = copy_bandwidth(args.n, dtype, args.repeats)
        elementwise(args.n, dtype, args.repeats, copy_gbs)
    mlp(args.batch, args.repeats, copy_bandwidth(args.n, np.float64, args.repeats))
    return 0


if __name__ == "__main__":
    if "--child" in sys.argv or "--peers" in sys.argv:     # not pinned to one CPU (_harness)
        os.environ.setdefault("TAPEJIT_BENCH_CPUS", "all")
    sys.exit(main())
