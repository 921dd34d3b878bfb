"""Matrix products on one core: tapejit's kernel (codegen/gemm.py) against BLAS and JAX.

The products of the MLP gradient in bench/mlp.py (1,797 samples, 64-256-256-10; the three
256-wide ones are 1797x256 @ 256x256, its transposed-left 256x1797 @ 1797x256 and its
transposed-right 1797x256 @ (256x256)^T), float64 and float32. Rows, each the summed time of
those products:
  - tapejit's kernel (`tj_gemm.packed`, which generated code's `tj_gemm.matmul` calls for
    products of 2^20 multiply-adds or more, by default where numba targets AVX-512);
  - BLAS as generated code calls it otherwise (`tj_blas.matmul`, scipy's OpenBLAS through
    numba, with the kernels this environment selects) and numpy's `@` (numpy's OpenBLAS);
  - where OPENBLAS_CORETYPE is set, the BLAS call again in a fresh process without it
    (OpenBLAS's own choice of kernels for this CPU);
  - JAX `jit(a @ b)` where installed.
Every row is checked against numpy first. No goal of its own: these are the figures behind
the default of TAPEJIT_MATMUL and the MLP rows of bench/mlp.py and bench/peers.py.

    .venv/bin/python bench/gemm.py [--repeats 9] [--quick]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

MARK = "RESULT "
# (label, m, n, k, transpose left, transpose right)
PRODUCTS = [("x @ w1", 1797, 256, 64, False, False), ("h1 @ w2", 1797, 256, 256, False, False),
            ("h1^T @ d2", 256, 256, 1797, True, False), ("d2 @ w2^T", 1797, 256, 256, False, True),
            ("x^T @ d1", 64, 256, 1797, True, False)]
QUICK = [("a @ b", 60, 40, 30, False, False), ("a^T @ b", 40, 40, 60, True, False)]


def operands(products, dtype):
    """[(a, b, out, ta, tb, want)] for `products`, with a (b) stored transposed where ta (tb)."""
    rng = np.random.default_rng(0)
    out = []
    for _, m, n, k, ta, tb in products:
        a = rng.normal(size=(k, m) if ta else (m, k)).astype(dtype)
        b = rng.normal(size=(n, k) if tb else (k, n)).astype(dtype)
        out.append((a, b, np.empty((m, n), dtype), ta, tb, (a.T if ta else a) @ (b.T if tb else b)))
    return out


def all_products(matmul, cases):
    """A callable running `matmul(a, b, out, ta, tb)` over every case, checked first."""
    for a, b, out, ta, tb, want in cases:
        matmul(a, b, out, ta, tb)
        H.check_close(f"{getattr(matmul, '__module__', '')} {a.shape} {b.shape}", out, want,
                      rtol=1e-4 if a.dtype == np.float32 else 1e-10,
                      atol=1e-4 if a.dtype == np.float32 else 1e-10)
    return lambda: [matmul(a, b, out, ta, tb) for a, b, out, ta, tb, _ in cases]


def numpy_matmul(a, b, out, ta, tb):
    np.matmul(a.T if ta else a, b.T if tb else b, out=out)


def child(products, dtype, repeats: int) -> None:
    """In a fresh process: the BLAS call's timings, as a JSON line."""
    from tapejit.codegen import blas
    timing = H.measure(all_products(blas.matmul, operands(products, dtype)), repeats)
    print(MARK + json.dumps(timing.runs), flush=True)


def blas_without_coretype(products, dtype, repeats: int, quick: bool) -> H.Timing:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    cmd = [sys.executable, os.path.abspath(__file__), "--child", np.dtype(dtype).name,
           "--repeats", str(repeats)] + (["--quick"] if quick else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"child failed:\n{proc.stdout}{proc.stderr}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)][-1]
    return H.Timing.of(json.loads(line[len(MARK):]))


def jax_row(table, products, dtype, repeats):
    def build():
        import jax
        jax.config.update("jax_enable_x64", True)
        cases = operands(products, dtype)
        mm = jax.jit(lambda a, b, ta, tb: (a.T if ta else a) @ (b.T if tb else b),
                     static_argnums=(2, 3))
        args = [(jax.numpy.asarray(a), jax.numpy.asarray(b), ta, tb)
                for a, b, _, ta, tb, _ in cases]
        H.check_close(f"jax {np.dtype(dtype).name}", [np.asarray(mm(*x)) for x in args],
                      [c[-1] for c in cases], rtol=1e-4 if dtype == np.float32 else 1e-10,
                      atol=1e-4 if dtype == np.float32 else 1e-10)
        return lambda: [jax.block_until_ready(mm(*x)) for x in args]
    H.try_row(table, "jax jit(a @ b)", "jax", build, repeats)


def main() -> None:
    if "--child" in sys.argv:
        args = sys.argv[1:]
        products = QUICK if "--quick" in args else PRODUCTS
        child(products, np.dtype(args[args.index("--child") + 1]).type,
              int(args[args.index("--repeats") + 1]))
        return
    args = H.parse_args(H.make_parser(__doc__, repeats=9))
    H.print_header("bench/gemm.py: matrix products, tapejit's kernel against BLAS", args)
    from tapejit.codegen import blas, gemm
    coretype = os.environ.get("OPENBLAS_CORETYPE")
    print(f"   numba targets {'AVX-512' if gemm.AVX512 else 'no AVX-512'} "
          f"({gemm.VECTOR_BYTES}-byte vectors); OPENBLAS_CORETYPE={coretype or '(unset)'}")
    products = QUICK if args.quick else PRODUCTS
    for dtype in (np.float64, np.float32):
        cases = operands(products, dtype)
        name = np.dtype(dtype).name
        table = H.Table(f"{name}: {', '.join(p[0] for p in products)} (summed)",
                        ref="BLAS (tj_blas)", ratio_name="x BLAS")
        table.add("tapejit kernel (tj_gemm)", H.measure(all_products(gemm.packed, cases),
                                                        args.repeats))
        table.add("BLAS (tj_blas)", H.measure(all_products(blas.matmul, cases), args.repeats),
                  note=f"OPENBLAS_CORETYPE={coretype}" if coretype else "")
        table.add("numpy @", H.measure(all_products(numpy_matmul, cases), args.repeats))
        if coretype:
            table.add("BLAS (tj_blas), OPENBLAS_CORETYPE unset",
                      blas_without_coretype(products, dtype, args.repeats, args.quick),
                      note="fresh process: OpenBLAS picks the kernels for this CPU")
        jax_row(table, products, dtype, args.repeats)
        table.print()
        ours = table.seconds("tapejit kernel (tj_gemm)")
        for ref in ("BLAS (tj_blas)", "BLAS (tj_blas), OPENBLAS_CORETYPE unset", "jax jit(a @ b)"):
            if table.seconds(ref) is not None:
                H.ratio_line(f"tapejit kernel / {ref} ({name})", ours, table.seconds(ref))


if __name__ == "__main__":
    main()
