"""The CUDA backend on a GPU: the zoo's correctness on the device, then the elementwise gradient
(bench/elementwise.py's `f`, 10^8 elements) and the MLP training-step gradient (bench/mlp.py's
`loss`, batch 65,536) with `backend="cuda"` on device-resident arrays, each against the
device's copy bandwidth (a device-to-device copy of the same array).

Bandwidth of a row = the bytes it must move at least (inputs read once, outputs written once)
over its median time; the copy row moves 2 x its array. Exits with a message, and status 0,
where the CUDA backend cannot run (no numba-cuda, or no GPU).

    .venv/bin/python bench/cuda.py [--n 100000000] [--batch 65536] [--repeats 9]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "tests"))

import tapejit as tj  # noqa: E402
from tapejit import cuda_support  # noqa: E402


def timed(fn, repeats: int) -> float:
    """Median seconds of `fn()` (after one warm-up), synchronising the device each time."""
    from numba import cuda
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
    from numba import cuda
    a = cuda.to_device(np.ones(n, dtype))
    b = cuda.device_array_like(a)
    return row(f"device copy {np.dtype(dtype).name}[{n}]", timed(lambda: b.copy_to_device(a),
                                                                 repeats), 2 * a.nbytes)


def elementwise(n: int, dtype, repeats: int, copy_gbs: float) -> None:
    from numba import cuda
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
    from numba import cuda
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000_000)
    parser.add_argument("--batch", type=int, default=65_536)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    reason = cuda_support.problem()
    if reason is not None or cuda_support.cuda_status().startswith("the numba CUDA simulator"):
        print(f"bench/cuda.py needs a GPU: {reason or 'the simulator is on'}")
        return 0
    print(f"device: {cuda_support.cuda_status()}")
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
    sys.exit(main())
