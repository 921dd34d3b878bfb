"""The CUDA backend's checks, run in a child process by test_cuda.py (the CUDA simulator
replaces numba.cuda process-wide, so it cannot share the test process).

    python cuda_check.py sim    # NUMBA_ENABLE_CUDASIM=1: the zoo and the op table on the
                                # simulator against the interpreter
    python cuda_check.py ptx    # every generated kernel compiled to PTX for sm_90
    python cuda_check.py device # the zoo on a real GPU
    python cuda_check.py random # tj.random only: its stream on the simulator (or a GPU) equals
                                # the CPU's; without the simulator, its kernels compiled to PTX
    python cuda_check.py products  # matrix products through cuBLAS (TAPEJIT_CUDA_PRODUCTS=
                                # cublas; on the simulator, cuda_support's model of cuBLAS)

Prints one line per check ("ok <name>", "FAIL <name>: ...", or "skip: <reason>") and exits 1
if any check failed.
"""
from __future__ import annotations

import inspect
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import tapejit as tj  # noqa: E402
from tapejit.cuda_support import numba_cuda  # noqa: E402  (numba.cuda after the numpy shim)
from op_db import ROWS, combined  # noqa: E402
from zoo import ZOO  # noqa: E402

CHUNK = 24
PRIMITIVE_ROWS = [row for row in ROWS if row.prim is not None]
CHUNKS = [PRIMITIVE_ROWS[i:i + CHUNK] for i in range(0, len(PRIMITIVE_ROWS), CHUNK)]


def random_loss(mu, sigma, key):
    """Every tj.random distribution in one scalar: a wrong random bit changes its value."""
    keys = tj.random.split(key, 3)
    z = mu + sigma * tj.random.normal(keys[0], (4, 3))
    u = tj.random.uniform(tj.random.fold_in(key, 7), (3,), np.float32, -1.0, 2.0)
    kept = tj.random.bernoulli(keys[1], 0.7, (4, 3))
    ints = tj.random.randint(keys[2], (3,), -5, 100) + tj.random.categorical(key, mu)
    return np.sum(np.where(kept, np.sin(z), 0) * u) + np.sum(ints * mu)


def random_args():
    return np.linspace(-1.0, 1.0, 3), np.float64(0.5), tj.random.key(11)


def pair_forces(x):
    """A pair nest: per i, a sum over j of a function of x[i] - x[j] (one thread per i)."""
    d = x[:, None, :] - x[None, :, :]
    return np.sum((1.0 / (np.sum(d * d, axis=-1) + 1.0))[:, :, None] * d, axis=1)


def pair_energy(x):
    """A pairwise energy: its gradient's pair nest sums over j per i and over i per j."""
    d = x[:, None, :] - x[None, :, :]
    return np.sum(1.0 / (np.sum(d * d, axis=-1) + 1.0))


def short_rows(a):
    """Rows of 5 summed inside one thread each, next to a sum over the rows."""
    return np.sum(np.log1p(np.sum(np.exp(a), axis=1)))


def long_rows(a):
    """Rows of 40: a block per row, its threads striding over the row."""
    return np.sum(np.log(np.sum(np.exp(a), axis=1)) * np.arange(1, a.shape[0] + 1))


def mapping_programs():
    """(name, fn, args) of the nests the thread form (codegen/cuda_thread.py) and the block
    forms each take; square, size-1 and size-0 axes."""
    rng = np.random.default_rng(3)
    yield "pairs", pair_forces, (rng.normal(size=(7, 3)),)
    yield "pairs of 1", pair_forces, (rng.normal(size=(1, 3)),)
    yield "pair energy", pair_energy, (rng.normal(size=(6, 3)),)
    # more than plan.SHORT atoms: j in chunks (cuda_support.chunks; 4 of 9, 9, 9, 6 atoms on
    # the simulator)
    yield "chunked pairs", pair_forces, (rng.normal(size=(33, 3)),)
    yield "chunked pair energy", pair_energy, (rng.normal(size=(33, 3)),)    # (gradient only)
    yield "short rows", short_rows, (rng.normal(size=(5, 5)),)
    yield "short rows of 0", short_rows, (np.zeros((4, 0)),)
    yield "long rows", long_rows, (rng.normal(size=(3, 40)),)


def check_mappings() -> None:
    """The mapping programs' values (jit, twice) against numpy, and their gradients against
    the interpreter."""
    for name, fn, args in mapping_programs():
        on_cuda = tj.jit(fn, backend="cuda")
        with np.errstate(divide="ignore"):
            want = fn(*args)
        # (a forward pair energy of 33 atoms is 1,089 threads: 10 s on the simulator)
        for _ in range(0 if name == "chunked pair energy" else 2):
            got = on_cuda(*args)
            got = got.copy_to_host() if hasattr(got, "copy_to_host") else np.asarray(got)
            np.testing.assert_allclose(np.reshape(got, np.shape(want)), want, rtol=1e-12,
                                       atol=1e-14, err_msg=name)
        if np.ndim(want) == 0 and np.isfinite(want):
            check_values(name, fn, args, (0,), False)


def programs():
    """(name, fn, args, argnums, has_aux) of every checked program."""
    for prog in ZOO:
        yield prog.name, prog.fn, prog.make_args(np.float64), prog.argnums, prog.has_aux
    for name, fn, args in mapping_programs():     # (their forms' PTX; values: check_mappings)
        if name in ("chunked pairs", "long rows"):
            yield name, (lambda f: lambda x: np.sum(f(x) ** 2))(fn), args, (0,), False
        elif name == "chunked pair energy":
            yield name, fn, args, (0,), False
    yield "random", random_loss, random_args(), (0, 1), False
    for rows in CHUNKS:
        fn, args = combined(rows)
        argnums = tuple(i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f")
        yield f"ops {rows[0].name}..{rows[-1].name}", fn, args, argnums, False


def check_values(name, fn, args, argnums, has_aux, device_args=None, rtol=1e-9,
                 calls=1) -> None:
    """`calls` calls of one CUDA transform (the first compiles, later ones reuse it) against
    the interpreter."""
    on_cuda = tj.value_and_grad(fn, argnums=argnums, has_aux=has_aux, backend="cuda")
    want = tj.value_and_grad(fn, argnums=argnums, has_aux=has_aux, backend="interpret")(*args)
    want_leaves = tj.pytree.flatten(want)[0]
    for _ in range(calls):
        got_leaves = tj.pytree.flatten(on_cuda(*(device_args or args)))[0]
        assert len(got_leaves) == len(want_leaves)
        for g, w in zip(got_leaves, want_leaves):
            g = g.copy_to_host() if hasattr(g, "copy_to_host") else g
            np.testing.assert_allclose(np.asarray(g).reshape(np.shape(w)), w, rtol=rtol,
                                       atol=rtol * 1e-3, err_msg=name)
            assert np.asarray(g).dtype == np.asarray(w).dtype, name


def run_values(on_device: bool) -> int:
    cuda = numba_cuda()
    failed = 0
    try:
        check_training_loop(cuda)
        print("ok training loop on the device", flush=True)
        check_random_stream()
        print("ok random stream", flush=True)
        check_mappings()
        print("ok thread and block forms", flush=True)
    except Exception as err:
        failed += 1
        print(f"FAIL training loop, random stream or forms: {type(err).__name__}: {err}",
              flush=True)
        traceback.print_exc(limit=-3)
    for name, fn, args, argnums, has_aux in programs():
        try:
            check_values(name, fn, args, argnums, has_aux)
            if on_device and name == ZOO[0].name:   # device arrays in, device arrays out
                moved = tj.pytree.unflatten(*_device_leaves(args, cuda))
                check_values(name + " (device arrays)", fn, args, argnums, has_aux, moved)
            if any(p.name == name for p in ZOO):     # float32 stays float32
                prog = next(p for p in ZOO if p.name == name)
                check_values(name + " float32", fn, prog.make_args(np.float32), argnums,
                             has_aux, rtol=2e-4)
            print("ok", name, flush=True)
        except Exception as err:    # report every program, then fail
            failed += 1
            print(f"FAIL {name}: {type(err).__name__}: {err}", flush=True)
            traceback.print_exc(limit=-3)
    return failed


def product_programs():
    """(name, fn, args) of products of every form cuBLAS takes: plain, either operand
    transposed (by the contraction or by a transpose), stacks, and sizes 0 and 1."""
    rng = np.random.default_rng(5)

    def r(*shape, dtype=np.float64):
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)

    def mlp(w, x):
        return np.sum(np.tanh(x @ w) ** 2)

    # sizes above passes/contract.py's SMALL (16): smaller products become loop nests
    yield "square 17x17 @ 17x17", mlp, (r(17, 17), r(17, 17))
    yield "float32", mlp, (r(17, 19, dtype=np.float32), r(20, 17, dtype=np.float32))
    yield "transposes", lambda a, b: np.sum(np.sin(a.T @ b.T)), (r(17, 20), r(19, 17))
    yield "one row", mlp, (r(17, 18), r(1, 17))
    yield "contracted size 0", lambda w, x: np.sum((x @ w + 1.0) ** 2), (r(0, 17), r(18, 0))
    yield "stacks, one transposed", lambda a, b: np.sum(np.cos(a @ np.swapaxes(b, 1, 2))), \
        (r(2, 17, 18), r(2, 17, 18))
    yield "empty stack", lambda a, b: np.sum(a @ b) + np.sum(a), (r(0, 17, 18), r(0, 18, 17))
    yield "two-layer MLP", two_layers, ({"w1": r(17, 19), "b1": r(19), "w2": r(19, 18)},
                                        r(19, 17))      # batch == hidden width


def two_layers(p, x):
    """Five products: two forward, a weight gradient and an input gradient per layer but the
    first's input gradient."""
    return np.mean((np.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]) ** 2)


def run_products() -> int:
    """Each product program through cuBLAS (`cuda_support.gemm`, counted) against the
    interpreter; the MLP also with device arrays in and out."""
    from tapejit import cuda_support
    calls = []
    gemm = cuda_support.gemm
    cuda_support.gemm = lambda *args: (calls.append(args), gemm(*args))[1]
    failed = 0
    for name, fn, args in product_programs():
        start = time.perf_counter()
        try:
            del calls[:]
            single = tj.pytree.flatten(args)[0][0].dtype == np.float32
            check_values(name, fn, args, (0, 1), False, rtol=2e-4 if single else 1e-9,
                         calls=2)
            if fn is two_layers:
                check_values(name, fn, args, (0, 1), False,
                             tj.pytree.unflatten(*_device_leaves(args, numba_cuda())))
            assert calls, f"{name}: no product went to cuBLAS"
            print(f"ok {name} ({len(calls)} cuBLAS calls, {time.perf_counter() - start:.1f} s)",
                  flush=True)
        except Exception as err:
            failed += 1
            print(f"FAIL {name}: {type(err).__name__}: {err}", flush=True)
            traceback.print_exc(limit=-3)
    return failed


def check_random_stream() -> None:
    """tj.random's bits, keys and integers on the CUDA backend equal numpy's (eager) bit for
    bit, for several keys with one compiled program; its floats to rounding (math libraries
    differ in the last bit)."""
    def draws(key):
        return (tj.random.bits(key, (2, 3), np.uint64), tj.random.split(key, 3),
                tj.random.fold_in(key, 5), tj.random.uniform(key, (5,), np.float32),
                tj.random.randint(key, (4,), -3, 10), tj.random.bernoulli(key, 0.3, (6,)),
                tj.random.normal(key, (3,)))
    on_cuda = tj.jit(draws, backend="cuda")
    for seed in range(3):
        key = tj.random.key(seed)
        for got, want in zip(on_cuda(key), draws(key)):
            got = got.copy_to_host() if hasattr(got, "copy_to_host") else np.asarray(got)
            assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
            if want.dtype.kind == "f":
                np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
            else:
                np.testing.assert_array_equal(got, want)
    assert on_cuda.cache_info()["traces"] == 1, on_cuda.cache_info()


def run_random() -> int:
    """The random checks alone: values on the simulator or a GPU, else PTX compilation."""
    from numba import config
    cuda = numba_cuda()
    if not config.ENABLE_CUDASIM and not cuda.is_available():
        return run_ptx(only="random")
    try:
        check_random_stream()
        print("ok random stream", flush=True)
        check_values("random", random_loss, random_args(), (0, 1), False)
        print("ok random", flush=True)
    except Exception as err:
        print(f"FAIL random: {type(err).__name__}: {err}", flush=True)
        traceback.print_exc(limit=-3)
        return 1
    return 0


def check_training_loop(cuda) -> None:
    """Three jitted SGD steps of the zoo's MLP with the parameters kept on the device (each
    step's device results are the next step's arguments), against the interpreter."""
    from zoo import mlp_args, mlp_loss

    def step(params, x, labels, lr):
        loss, grads = tj.value_and_grad(mlp_loss)(params, x, labels)
        return {k: params[k] - lr * grads[k] for k in params}, loss

    params, x, labels = mlp_args()
    on_device = {k: cuda.to_device(v) for k, v in params.items()}
    d_x, d_labels = cuda.to_device(x), cuda.to_device(labels)
    device_step, host_step = tj.jit(step, backend="cuda"), tj.jit(step, backend="interpret")
    for _ in range(3):
        on_device, loss = device_step(on_device, d_x, d_labels, 0.1)
        params, want = host_step(params, x, labels, 0.1)
        np.testing.assert_allclose(loss, want, rtol=1e-9)
    for k, v in params.items():
        assert not isinstance(on_device[k], np.ndarray), "parameters left the device"
        np.testing.assert_allclose(on_device[k].copy_to_host(), v, rtol=1e-9, atol=1e-12)
    info = device_step.cache_info()
    assert (info["traces"], info["hits"]) == (1, 2), info


def _device_leaves(args, cuda):
    leaves, treedef = tj.pytree.flatten(tuple(args))
    return treedef, [cuda.to_device(np.ascontiguousarray(leaf))
                     if isinstance(leaf, np.ndarray) else leaf for leaf in leaves]


def run_ptx(only: str | None = None) -> int:
    from numba import types
    cuda = numba_cuda()
    from numba.np import numpy_support

    from tapejit.avals import Aval
    from tapejit.disk.store import cache_root, load_module
    from tapejit.codegen.cuda import ENTRY, generate, var_name
    try:
        cuda.compile_ptx(lambda a: None, (types.float64[:],), cc=(9, 0))
    except Exception as err:     # no NVVM/NVRTC: the toolkit wheels are not installed
        print(f"skip: cuda.compile_ptx unavailable ({type(err).__name__}: {err})"[:300])
        return 0
    failed = kernels = 0
    for name, fn, args, argnums, has_aux in programs():
        if name.startswith("ops") and "--zoo" in sys.argv or only not in (None, name):
            continue
        ex = tj.explain(fn, argnums=argnums, has_aux=has_aux, backend="cuda")(*args)
        avals = {var_name(v): v.aval for v in _vars(ex.tape)}
        avals.update({f"t_p_{name}": Aval((1, *aval.shape), aval.dtype)   # partial results
                      for name, aval in list(avals.items())})
        module = load_module(generate(ex.tape)[0], ENTRY, key="cuda").fn.__globals__
        try:
            for kname, kernel in sorted(module.items()):
                if kname.startswith("t_k"):
                    params = list(inspect.signature(kernel.py_func).parameters)
                    sig = tuple(types.int64[::1] if p == "S" else types.int64
                                if p in ("t_nc", "t_cs") else
                                types.Array(numpy_support.from_dtype(avals[p].dtype),
                                            max(avals[p].ndim, 1), "C") for p in params)
                    ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=(9, 0))
                    assert ".target sm_90" in ptx
                    # cache=True: a GPU keeps its code beside the module's (tapejit's folder)
                    assert kernel._cache.cache_path == str(cache_root() / "__pycache__"), \
                        (kname, type(kernel._cache).__name__, kernel._cache.cache_path)
                    kernels += 1
            print("ok", name, flush=True)
        except Exception as err:
            failed += 1
            print(f"FAIL {name}: {type(err).__name__}: {str(err)[:2000]}", flush=True)
    print(f"{kernels} kernels compiled to PTX, each cached on disk in {cache_root()}")
    return failed


def _vars(tape):
    yield from tape.invars
    yield from tape.constvars
    for eqn in tape.eqns:
        yield from eqn.outs
        if eqn.op == "fused":     # (other sub-tapes run on the host, under their own names)
            yield from _vars(eqn.kw["body"])


def main(mode: str) -> int:
    if mode == "sim":
        return run_values(on_device=True)
    if mode == "ptx":
        return run_ptx()
    if mode == "random":
        return run_random()
    if mode == "products":
        os.environ["TAPEJIT_CUDA_PRODUCTS"] = "cublas"
        tj.config.reload()
    cuda = numba_cuda()
    if not cuda.is_available():
        print("skip: no CUDA GPU")
        return 0
    return run_products() if mode == "products" else run_values(on_device=True)


if __name__ == "__main__":
    sys.exit(1 if main(sys.argv[1]) else 0)
