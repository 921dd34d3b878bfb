"""tapejit against its peers: the same gradients in JAX, PyTorch, HIPS autograd and by hand.

Every workload on every peer that is installed (the others print "not installed"; see
bench/README.md to install them), in two configurations, each in a child process of its own
(thread pools are sized at import), one after the other:

  default threading   the headline, how users run: no CPU pin and no thread settings from the
                      bench; every library at its defaults (tapejit's thread budget, numba's
                      threads, OpenBLAS's, XLA's, torch's)
  one thread          the process pinned to one CPU with the harness's one-thread settings
                      (BLAS, XLA, torch on one thread; tapejit's budget follows the pin: 1)

Each child checks each gradient against tapejit's (or the hand-written one), times the peers
in interleaved rounds (each round runs every peer once, so load from other jobs falls on all
alike), and prints per workload the median steady-state time, the ratio to tapejit and the
first two calls (trace + compile, where there is one: tapejit runs its first call on the numpy
interpreter and compiles on the second). The parent then prints two Markdown tables, default
threading first with each row's speed-up from one thread to all cores (one-thread median /
default median), one thread second, and the goal lines of the default-threading table:
tapejit <= 0.95x JAX (mlp), <= 0.95x the best of hand-written and torch.compile (gmm), ahead
of every peer (elementwise; dispatch: every autodiff peer, the hand-written `2*x` being no call
of a compiled function), <= 2x the hand-written @njit pair loop (lennard_jones), never slower
with all cores than with one (within 5%), and at least 1.5x faster with all cores on mlp, gmm
and elementwise where there are 2 CPUs or more. Workloads (float64):

  elementwise     grad of sum(sin(x)*exp(-x*x) + tanh(x)*x), x of 10^6 elements
  dispatch        grad of sum(x*x), x of 10 elements (per-call overhead)
  mlp             grad of softmax cross-entropy of a 64-256-256-10 tanh MLP, 1,797 samples
  lennard_jones   grad of an all-pairs Lennard-Jones energy, 1,000 atoms (broadcasting)
  gmm             ADBench's GMM objective, d=10, K=25, n=10,000 random points: the gradient
                  w.r.t. (alphas, means, icf), and the gradient / objective time ratio;
                  hand-written: `gmm_grad_numpy` (numpy forward + backward, checked against
                  tapejit's gradient to rtol 1e-10)

Peers: tapejit [numba] (`tj.grad`; objective: `tj.jit`), JAX `jit(grad)`, PyTorch eager
autograd and `torch.compile` (forward compiled, AOTAutograd backward), HIPS autograd
(`autograd.grad`), and the hand-written gradient of bench/ (numpy or @njit) where there is one.
First calls run on fresh caches in each child: a new TAPEJIT_CACHE_DIR and
TORCHINDUCTOR_CACHE_DIR (--keep-cache uses the environment's).

    .venv/bin/python bench/peers.py                       # everything, both configurations
    .venv/bin/python bench/peers.py --quick               # small sizes, 2 repeats
    .venv/bin/python bench/peers.py --workloads gmm,mlp --peers tapejit,jax --threads all
"""
from __future__ import annotations

import _harness as H  # first: pins the process (unless TAPEJIT_BENCH_CPUS=all)

import dataclasses  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

PEERS = ("tapejit", "tapejit-numba", "jax", "torch", "torch.compile", "autograd",
         "hand-written")
LABELS = {"tapejit": "tapejit [numba]", "tapejit-numba": "tapejit, TAPEJIT_CODEGEN=numba",
          "jax": "JAX jit(grad)", "torch": "PyTorch eager",
          "torch.compile": "torch.compile", "autograd": "HIPS autograd",
          "hand-written": "hand-written"}
MODULES = {"jax": "jax", "torch": "torch", "torch.compile": "torch", "autograd": "autograd"}
AUTODIFF = ("jax", "torch", "torch.compile", "autograd")
# the default-threading goals: workload -> (what, the peers whose best time is the reference
# (None: every other peer), the most tapejit's time may be of it)
GOALS = {"elementwise": ("the best peer", None, 1.0),
         "dispatch": ("the best autodiff peer", AUTODIFF, 1.0),
         "mlp": ("JAX jit(grad)", ("jax",), 0.95),
         "lennard_jones": ("hand-written @njit pair loop", ("hand-written",), 2.0),
         "gmm": ("the best of hand-written and torch.compile", ("hand-written", "torch.compile"),
                 0.95)}
SPEEDUP_GOAL = 1.5          # one thread -> all cores, on 2 CPUs or more
SPEEDUP_WORKLOADS = ("mlp", "gmm", "elementwise")


# ---------------------------------------------------------------------------------------------
# the workloads, each written once against an array module `xp` (numpy, autograd.numpy,
# jax.numpy, or the `TorchNP` shim below)


def elementwise(xp, x):
    return xp.sum(xp.sin(x) * xp.exp(-x * x) + xp.tanh(x) * x)


def sum_squares(xp, x):
    return xp.sum(x * x)


def mlp(xp, w1, b1, w2, b2, w3, b3, x, y_onehot):
    h = xp.tanh(x @ w1 + b1)
    h = xp.tanh(h @ w2 + b2)
    logits = h @ w3 + b3
    shifted = logits - xp.max(logits, axis=1, keepdims=True)
    log_probs = shifted - xp.log(xp.sum(xp.exp(shifted), axis=1, keepdims=True))
    return -xp.mean(xp.sum(y_onehot * log_probs, axis=1))


def lennard_jones(xp, x, eye):
    d = x[:, None, :] - x[None, :, :]
    r2 = xp.sum(d * d, axis=-1)
    inv2 = 1.0 / xp.where(eye, 1.0, r2)
    inv6 = inv2 * inv2 * inv2
    return 2.0 * xp.sum(xp.where(eye, 0.0, inv6 * inv6 - inv6))


def _logsumexp(xp, z, axis):
    m = xp.max(z, axis=axis, keepdims=True)
    return xp.sum(m, axis=axis) + xp.log(xp.sum(xp.exp(z - m), axis=axis))


def gmm(xp, alphas, means, icf, x, tril_index, tril_mask, wishart_gamma, wishart_m, const):
    """ADBench's GMM objective (its numpy reference, written for `xp`): the log-likelihood of
    `x` under K Gaussians with weights softmax(alphas), means, and inverse
    covariance factors Q = diag(exp(icf[:, :d])) + strictly-lower L (icf[:, d:], column-major),
    plus a Wishart prior. `const` holds the data-independent terms (log-gamma and pi)."""
    n, d = x.shape
    q_diag = xp.exp(icf[:, :d])                                   # (K, d)
    sum_qs = xp.sum(icf[:, :d], axis=1)                           # (K,)
    ls = icf[:, tril_index] * tril_mask                           # (K, d, d) strictly lower
    xc = x[:, None, :] - means[None, :, :]                        # (n, K, d)
    qx = q_diag[None, :, :] * xc + xp.einsum("kij,nkj->nki", ls, xc)
    inner = alphas[None, :] + sum_qs[None, :] - 0.5 * xp.sum(qx * qx, axis=2)
    prior = xp.sum(0.5 * wishart_gamma * wishart_gamma
                   * (xp.sum(q_diag * q_diag, axis=1) + xp.sum(icf[:, d:] * icf[:, d:], axis=1))
                   - wishart_m * sum_qs)
    return (xp.sum(_logsumexp(xp, inner, 1)) - n * _logsumexp(xp, alphas, 0) + prior + const)


def gmm_grad_numpy(alphas, means, icf, x, tril_index, tril_mask, wishart_gamma, wishart_m):
    """Hand-written numpy gradient of `gmm` w.r.t. (alphas, means, icf): one forward pass that
    keeps what the backward needs, then the backward, vectorised over points and components
    (the (K, n, d) layout lets the per-component products run as stacked BLAS matmuls).

    With Q_k = diag(exp(icf[k, :d])) + L_k, xc = x_i - mu_k, qx = Q_k xc and
    P[k, i] = softmax_k(alphas_k + sum_qs_k - |qx|^2 / 2) (the responsibilities):
      d/d alphas_k = sum_i P[k, i] - n softmax(alphas)_k
      d/d mu_k     = Q_k^T sum_i P[k, i] qx[k, i]
      d/d Q_k      = -sum_i P[k, i] qx[k, i] xc[k, i]^T  (+ gamma^2 on the prior's entries)
    and icf's diagonal part picks up exp() and the sum_qs term (sum_i P[k, i] - m)."""
    n, d = x.shape
    log_diag = icf[:, :d]
    q_diag = np.exp(log_diag)                                     # (K, d)
    q = icf[:, tril_index] * tril_mask                            # (K, d, d) strictly lower
    q[:, np.arange(d), np.arange(d)] = q_diag                     # Q_k, lower triangular
    xc = x[None, :, :] - means[:, None, :]                        # (K, n, d)
    qx = xc @ q.transpose(0, 2, 1)                                # (K, n, d): Q_k xc
    inner = (alphas + log_diag.sum(axis=1))[:, None] - 0.5 * np.einsum("kni,kni->kn", qx, qx)
    top = inner.max(axis=0)                                       # (n,)
    p = np.exp(inner - top)
    p /= p.sum(axis=0)                                            # responsibilities (K, n)
    # backward
    resp = p.sum(axis=1)                                          # (K,)
    a = np.exp(alphas - alphas.max())
    d_alphas = resp - n * a / a.sum()
    pq = p[:, :, None] * qx                                       # (K, n, d)
    d_means = np.einsum("kij,ki->kj", q, pq.sum(axis=1))          # Q_k^T sum_i P qx
    d_q = -(pq.transpose(0, 2, 1) @ xc)                           # (K, d, d)
    gamma2 = wishart_gamma * wishart_gamma
    d_icf = np.empty_like(icf)
    d_icf[:, :d] = ((np.diagonal(d_q, axis1=1, axis2=2) + gamma2 * q_diag) * q_diag
                    + (resp - wishart_m)[:, None])
    rows, cols = np.nonzero(tril_mask)                            # strictly lower entries
    lower = tril_index[rows, cols]                                # their columns of icf
    d_icf[:, lower] = d_q[:, rows, cols] + gamma2 * icf[:, lower]
    return d_alphas, d_means, d_icf


class TorchNP:
    """The few numpy names the workloads use, on torch tensors."""

    def __init__(self, torch: Any) -> None:
        self.t = torch
        for name in ("sin", "cos", "exp", "tanh", "log", "where", "einsum"):
            setattr(self, name, getattr(torch, name))

    def sum(self, x, axis=None, keepdims=False):
        return self.t.sum(x) if axis is None else self.t.sum(x, dim=axis, keepdim=keepdims)

    def mean(self, x):
        return self.t.mean(x)

    def max(self, x, axis, keepdims=False):
        return self.t.amax(x, dim=axis, keepdim=keepdims)


@dataclasses.dataclass
class Workload:
    name: str
    title: str
    fn: Callable[..., Any]         # fn(xp, *args) -> scalar
    args: list[Any]                # numpy arrays (and Python numbers)
    wrt: tuple[int, ...]           # which args are differentiated
    hand: Callable[[], Any] | None = None    # hand-written gradient (returns the wrt grads)
    hand_label: str = ""
    objective: bool = False        # also time the objective alone (gradient / objective)
    tiny: bool = False             # microsecond calls: loop each timed run
    tapejit_rtol: float = 1e-6     # tolerance of tapejit's gradient against the hand-written one


def workloads(quick: bool) -> dict[str, Callable[[], Workload]]:
    """name -> maker (data is made only for the workloads asked for)."""
    import elementwise as bench_ew
    import lennard_jones as bench_lj
    import mlp as bench_mlp

    def make_ew() -> Workload:
        n = 10**5 if quick else 10**6
        x = np.random.default_rng(0).uniform(-3.0, 3.0, size=n)
        return Workload("elementwise", f"grad of sum(sin(x)*exp(-x*x) + tanh(x)*x), n={n:,}",
                        elementwise, [x], (0,), lambda: (bench_ew.numba_grad(x),),
                        "@njit fused loop")

    def make_dispatch() -> Workload:
        x = np.linspace(-1.0, 1.0, 10)
        return Workload("dispatch", "grad of sum(x*x), n=10 (per-call overhead)", sum_squares,
                        [x], (0,), lambda: (2.0 * x,), "numpy 2*x",
                        tiny=True)

    def make_mlp() -> Workload:
        sizes, n = (bench_mlp.QUICK_SIZES, 200) if quick else (bench_mlp.SIZES, 1797)
        x, y, _ = bench_mlp.make_data(n, sizes)
        params = bench_mlp.init_params(sizes)
        keys = ["w1", "b1", "w2", "b2", "w3", "b3"]

        def hand() -> tuple:
            grads = bench_mlp.numpy_value_and_grad(params, x, y)[1]
            return tuple(grads[k] for k in keys)
        return Workload("mlp", f"grad of softmax cross-entropy, {'-'.join(map(str, sizes))} "
                        f"tanh MLP, {n} samples", mlp, [params[k] for k in keys] + [x, y],
                        tuple(range(6)), hand, "numpy fwd+bwd")

    def make_lj() -> Workload:
        x = bench_lj.positions(5 if quick else 10)
        eye = np.eye(len(x), dtype=bool)
        return Workload("lennard_jones", f"grad of all-pairs Lennard-Jones energy, {len(x)} "
                        f"atoms", lennard_jones, [x, eye], (0,),
                        lambda: (-bench_lj.numba_energy_forces(x)[1],), "@njit pair loop")

    return {"elementwise": make_ew, "dispatch": make_dispatch, "mlp": make_mlp,
            "lennard_jones": make_lj, "gmm": lambda: make_gmm(quick)}


def make_gmm(quick: bool) -> Workload:
    """ADBench's GMM inputs: random data, d=10, K=25, n=10,000 (quick: n=1,000)."""
    d, k, n = 10, 25, (1000 if quick else 10_000)
    rng = np.random.default_rng(0)
    alphas, means = rng.normal(size=k), rng.uniform(size=(k, d))
    icf = rng.normal(scale=0.5, size=(k, d + d * (d - 1) // 2))
    x = rng.normal(size=(n, d))
    index, mask, col = np.zeros((d, d), dtype=np.int64), np.zeros((d, d)), d
    for j in range(d):                        # column-major strictly-lower entries, as ADBench
        for i in range(j + 1, d):
            index[i, j], mask[i, j], col = col, 1.0, col + 1
    gamma, m = 1.0, 0.0
    m_n = m + d + 1
    log_gamma_d = 0.25 * d * (d - 1) * math.log(math.pi) + sum(
        math.lgamma(0.5 * m_n + 0.5 * (1 - j)) for j in range(1, d + 1))
    const = (-n * d * 0.5 * math.log(2 * math.pi)
             - k * (m_n * d * (math.log(gamma) - 0.5 * math.log(2)) - log_gamma_d))
    args = [alphas, means, icf, x, index, mask, gamma, m, const]
    return Workload("gmm", f"ADBench GMM objective, d={d}, K={k}, n={n:,}", gmm, args,
                    (0, 1, 2), hand=lambda: gmm_grad_numpy(*args[:8]),
                    hand_label="numpy fwd+bwd", objective=True, tapejit_rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# the peers: each builds (gradient fn, objective fn or None) from a workload; both take no
# arguments, run once, and return numpy arrays


def build_tapejit(w: Workload) -> tuple[Callable, Callable | None, str]:
    import tapejit as tj

    def f(*args: Any) -> Any:
        return w.fn(np, *args)
    g = tj.grad(f, argnums=w.wrt, backend="numba")
    obj = tj.jit(f, backend="numba")
    time.sleep(SETTLE_S)        # the budget of a quiet process (numpy made the data just now)
    return ((lambda: g(*w.args)), (lambda: obj(*w.args)),
            f"tapejit {tj.__version__}, {H.threads_text(tj.get_num_threads())}")


def build_jax(w: Workload) -> tuple[Callable, Callable | None, str]:
    import jax
    jax.config.update("jax_enable_x64", True)
    args = [jax.numpy.asarray(a) if isinstance(a, np.ndarray) else a for a in w.args]

    def f(*a: Any) -> Any:
        return w.fn(jax.numpy, *a)
    g, obj = jax.jit(jax.grad(f, argnums=w.wrt)), jax.jit(f)
    return (lambda: [np.asarray(v) for v in jax.block_until_ready(g(*args))],
            lambda: jax.block_until_ready(obj(*args)), f"jax {jax.__version__}")


def build_torch(w: Workload, compiled: bool) -> tuple[Callable, Callable | None, str]:
    import torch
    if H.ONE_THREAD:
        torch.set_num_threads(1)
    xp = TorchNP(torch)

    def f(*a: Any) -> Any:
        return w.fn(xp, *a)
    fc = torch.compile(f) if compiled else f
    args = [torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a
            for a in w.args]
    for i in w.wrt:
        args[i].requires_grad_(True)
    inputs = [args[i] for i in w.wrt]

    def grad() -> list:
        return [t.numpy() for t in torch.autograd.grad(fc(*args), inputs)]

    def objective() -> Any:
        with torch.no_grad():
            return fc(*args)
    return grad, objective, f"torch {torch.__version__}, {H.threads_text(torch.get_num_threads())}"


def build_autograd(w: Workload) -> tuple[Callable, Callable | None, str]:
    import autograd
    import autograd.numpy as anp
    rest = [i for i in range(len(w.args)) if i not in w.wrt]

    def f(diff: tuple, *others: Any) -> Any:
        full = dict(zip(w.wrt, diff)) | dict(zip(rest, others))
        return w.fn(anp, *(full[i] for i in range(len(w.args))))
    g = autograd.grad(f, 0)
    diff, others = tuple(w.args[i] for i in w.wrt), [w.args[i] for i in rest]
    version = getattr(autograd, "__version__", "")
    return (lambda: g(diff, *others)), (lambda: w.fn(np, *w.args)), f"autograd {version}".strip()


def build_hand(w: Workload) -> tuple[Callable, Callable | None, str]:
    if w.hand is None:
        raise LookupError("none for this workload")
    return w.hand, (lambda: w.fn(np, *w.args)) if w.objective else None, w.hand_label


def build_tapejit_numba(w: Workload) -> tuple[Callable, Callable | None, str]:
    """tapejit with numba compiling every program (the generator before the LLVM lowering):
    its programs are compiled here, under TAPEJIT_CODEGEN=numba, and then only called, so
    its first-call columns show cached calls."""
    from tapejit import config
    before = os.environ.get("TAPEJIT_CODEGEN")
    os.environ["TAPEJIT_CODEGEN"] = "numba"
    config.reload()
    try:
        grad, objective, version = build_tapejit(w)
        for fn in (grad, objective):     # the first calls may run on the interpreter
            if fn is not None:
                fn()
                H.settle(fn)
    finally:
        if before is None:
            os.environ.pop("TAPEJIT_CODEGEN")
        else:
            os.environ["TAPEJIT_CODEGEN"] = before
        config.reload()
    return grad, objective, f"{version}, compiled before timing"


BUILDERS = {"tapejit": build_tapejit, "tapejit-numba": build_tapejit_numba, "jax": build_jax,
            "torch": lambda w: build_torch(w, False),
            "torch.compile": lambda w: build_torch(w, True),
            "autograd": build_autograd, "hand-written": build_hand}


@dataclasses.dataclass
class Result:
    peer: str
    grad: H.Timing | None = None
    first: float | None = None          # seconds of the first gradient call
    second: float | None = None         # ... and of the second (tapejit compiles on it)
    objective: H.Timing | None = None
    note: str = ""
    calls: tuple[Callable, Callable | None] | None = None   # (gradient, objective) to time


def prepare(peer: str, w: Workload, want: list | None) -> tuple[Result, list | None]:
    """Build one peer on one workload, make its first two calls and check the second's
    gradient (the first peer's answer is the reference when there is no hand-written one);
    never raises."""
    res = Result(peer)
    module = MODULES.get(peer)
    if module and not H.have(module):
        res.note = "not installed"
        return res, want
    try:
        grad, objective, version = BUILDERS[peer](w)
        t0 = time.perf_counter()
        got = [np.asarray(g) for g in grad()]
        res.first = time.perf_counter() - t0
        t0 = time.perf_counter()
        got = [np.asarray(g) for g in grad()]
        res.second = time.perf_counter() - t0
        if want is None:
            want = got
        elif peer == "tapejit" and w.hand is not None:
            H.check_close(f"{w.name}: {LABELS[peer]} vs {w.hand_label}, rtol "
                          f"{w.tapejit_rtol:g}", got, want,
                          rtol=w.tapejit_rtol, atol=1e-9 if w.tapejit_rtol >= 1e-6 else 0.0)
        else:
            H.check_close(f"{w.name}: {LABELS[peer]}", got, want, rtol=1e-6, atol=1e-9)
        if w.objective and objective is not None:
            objective()
        res.calls, res.note = (grad, objective if w.objective else None), version
    except LookupError as err:
        res.note = str(err)
    except Exception as err:  # noqa: BLE001 - a broken peer must not stop the others
        res.note = f"failed: {type(err).__name__}: {err}".splitlines()[0][:100]
    return res, want


# the pause before each peer's turn, so that the previous peer's thread pool has gone back to
# sleep and each library runs as it would alone in a user's process: OpenBLAS's workers spin
# for 2^28 cycles after a call (0.10 s at 2.6 GHz, 0.13 s at 2 GHz), OpenMP's and XLA's for a
# while too. A pool still spinning slows every peer (on 2 cores, with 0.1 s: the hand-written
# MLP gradient 22.8 ms against 17.0 ms) and holds tapejit to one thread (threads.py), which
# lends its products to those workers and so keeps them spinning through its turn
SETTLE_S = 0.25


def interleaved(fns: dict[str, Callable], repeats: int, min_run_s: float) -> dict[str, H.Timing]:
    """Per-call times of each function: warm-up calls, then `repeats` rounds in which every
    function runs once in turn, so that load from other jobs falls on all of them alike; each
    turn starts after SETTLE_S of quiet and one untimed call."""
    number = {k: H.measure(fn, 1, min_run_s=min_run_s).number for k, fn in fns.items()}
    runs: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            time.sleep(SETTLE_S)
            fn()
            t0 = time.perf_counter()
            for _ in range(number[k]):
                fn()
            runs[k].append((time.perf_counter() - t0) / number[k])
    return {k: H.Timing.of(v) for k, v in runs.items()}


def time_all(results: list[Result], w: Workload, repeats: int) -> None:
    """The gradient times of every prepared peer (then their objective times), interleaved."""
    min_run = 0.2 if w.tiny else 0.0
    ready = {r.peer: r for r in results if r.calls is not None}
    for peer, t in interleaved({p: r.calls[0] for p, r in ready.items()}, repeats,
                               min_run).items():
        ready[peer].grad = t
    objectives = {p: r.calls[1] for p, r in ready.items() if r.calls[1] is not None}
    for peer, t in interleaved(objectives, repeats, min_run).items():
        ready[peer].objective = t


def as_row(r: Result) -> dict:
    """What the parent process needs of one peer's result (seconds; None: not measured)."""
    return {"grad": r.grad.median if r.grad else None, "first": r.first, "second": r.second,
            "objective": r.objective.median if r.objective else None, "note": r.note}


def cells(w: dict, peer: str) -> list[str]:
    """A peer's row: label, gradient, x tapejit, first call, second call, objective
    (grad/obj), note."""
    r, ref = w["results"][peer], w["results"].get("tapejit", {}).get("grad")
    label = LABELS[peer] + (f" ({w['hand_label']})" if peer == "hand-written" else "")
    if r["grad"] is None:
        return [label, "-", "-", "-", "-", "-", r["note"]]
    obj = (f"{H.fmt_time(r['objective'])} ({r['grad'] / r['objective']:.1f}x)"
           if r["objective"] else "-")
    return [label, H.fmt_time(r["grad"]), f"{r['grad'] / ref:.2f}x" if ref else "-",
            H.fmt_time(r["first"]), H.fmt_time(r["second"]), obj, r["note"]]


def print_workload(w: dict, threads: str) -> None:
    rows = [cells(w, peer) for peer in w["results"]]
    heads = ("peer", "gradient", "x tapejit", "first call", "second call", "objective (grad/obj)",
             "note")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
    print(f"\n[{H.THREADS[threads]}] {w['title']}")
    for row in (heads, tuple("-" * n for n in widths), *rows):
        print("  " + "  ".join(c.rjust(n) if 0 < i < 6 else c.ljust(n)
                               for i, (c, n) in enumerate(zip(row, widths))).rstrip())


def child(args: Any, names: list[str], peers: list[str]) -> None:
    """One configuration (`--config`) in this process: prepare, check and time every peer on
    every workload, print a table per workload, and write the results as JSON (`--results`)."""
    if not args.keep_cache:
        fresh = tempfile.mkdtemp(prefix="tapejit-peers-")
        os.environ["TAPEJIT_CACHE_DIR"] = os.path.join(fresh, "tapejit")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(fresh, "inductor")
    import run_all
    import tapejit as tj
    H.print_header(f"bench/peers.py, {H.THREADS[args.config]}: tapejit against JAX, PyTorch, "
                   f"HIPS autograd, by hand", args, rows=", ".join(LABELS[p] for p in peers),
                   extra=f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
                         f"{run_all.cpu_model()}; load average {run_all.loadavg()}")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    out = {"cpus": cpus, "tapejit_threads": tj.get_num_threads(), "workloads": {}}
    makers = workloads(args.quick)
    for name in names:
        w = makers[name]()
        want = [np.asarray(g) for g in w.hand()] if w.hand else None
        results = []
        for peer in peers:
            res, want = prepare(peer, w, want)
            results.append(res)
            H.flush()
        time_all(results, w, args.repeats)
        entry = {"title": w.title, "hand_label": w.hand_label,
                 "results": {r.peer: as_row(r) for r in results}}
        print_workload(entry, args.config)
        out["workloads"][name] = entry
    print(f"\nload average after: {run_all.loadavg()}")
    with open(args.results, "w") as fh:
        json.dump(out, fh)


def markdown(run: dict, one_thread: dict | None) -> list[str]:
    """A row per workload and peer: median, x tapejit, (with `one_thread`, the run of the same
    peers on one thread) the speed-up from one thread to this run, first calls, objective."""
    heads = ["workload", "peer", "gradient", "x tapejit", "first call", "second call",
             "objective (grad/obj)", "note"]
    if one_thread:
        heads.insert(4, "1 thread → all cores")
    lines = ["| " + " | ".join(heads) + " |",
             "|" + "|".join("---:" if 1 < i < len(heads) - 1 else "---"
                            for i in range(len(heads))) + "|"]
    for name, w in run["workloads"].items():
        for i, peer in enumerate(w["results"]):
            row = cells(w, peer)
            if one_thread:
                t_one = one_thread["workloads"].get(name, {}).get("results", {}).get(peer, {})
                t_all = w["results"][peer]["grad"]
                row.insert(3, f"{t_one['grad'] / t_all:.2f}x"
                           if t_all and t_one.get("grad") else "-")
            row = [c.replace("|", "\\|") for c in [name if i == 0 else "", *row]]
            lines.append("| " + " | ".join(row) + " |")
    return lines


# "never slower with all cores", within the noise of two runs in two processes minutes apart
# (a program with no parallel work, dispatch, runs the same code in both)
NOT_SLOWER = 1.05


def goal_lines(default: dict, one_thread: dict | None) -> list[str]:
    """Print the goals of the default-threading run (and, with the one-thread run, tapejit's
    speed-up goals); return the lines printed."""
    lines: list[str] = []
    for name, w in default["workloads"].items():
        what, against, goal = GOALS[name]
        grads = {p: r["grad"] for p, r in w["results"].items() if r["grad"] is not None}
        refs = {p: t for p, t in grads.items()
                if p not in ("tapejit", "tapejit-numba") and (against is None or p in against)}
        best = min(refs, key=refs.get, default=None)
        if best and (against is None or len(against) > 1):
            what += f" ({LABELS[best]})"
        H.ratio_line(f"tapejit [numba] / {what} ({name}, default threading)",
                     grads.get("tapejit"), refs.get(best), goal, collect=lines)
        H.ratio_line(f"tapejit [numba] / {LABELS['tapejit-numba']} ({name}, default "
                     f"threading: the LLVM lowering against numba's code)",
                     grads.get("tapejit"), grads.get("tapejit-numba"), NOT_SLOWER,
                     collect=lines)
    if one_thread is None:
        return lines
    many = default["cpus"] >= 2
    for name, w in default["workloads"].items():
        t_all = w["results"].get("tapejit", {}).get("grad")
        t_one = (one_thread["workloads"].get(name, {}).get("results", {}).get("tapejit", {})
                 .get("grad"))
        H.ratio_line(f"tapejit [numba] all cores / one thread ({name})", t_all, t_one,
                     NOT_SLOWER, collect=lines)
        if name in SPEEDUP_WORKLOADS:
            H.ratio_line(f"tapejit [numba] speed-up one thread -> all cores ({name}"
                         + ("" if many else "; one CPU: no goal") + ")", t_one, t_all,
                         SPEEDUP_GOAL if many else None, lower_is_better=False, collect=lines)
    return lines


def summary(runs: dict[str, dict | None]) -> list[str]:
    """Print the Markdown tables (default threading first, then one thread) and the goal lines;
    return them all as Markdown."""
    titles = {"all": "Default threading: no CPU pin, no thread settings from the bench, every "
                     "library at its defaults",
              "one": "One thread: pinned to one CPU, BLAS, XLA and torch on one thread"}
    md = []
    for threads, run in runs.items():
        md += [f"### {titles[threads]}", ""]
        if run is None:
            md += ["(failed: see the output above)", ""]
            continue
        md += [f"{run['cpus']} CPU{'s' * (run['cpus'] > 1)}; tapejit's thread budget "
               f"{run['tapejit_threads']}. Medians "
               f"of the gradient (x tapejit [numba])"
               + (", the speed-up from one thread to all cores (one-thread median / this "
                  "median)" if threads == "all" and runs.get("one") else "")
               + ", the first two calls, and for gmm the gradient / objective ratio.", "",
               *markdown(run, runs.get("one") if threads == "all" else None), ""]
    print("\n" + "\n".join(md), flush=True)
    if runs.get("all"):
        print("### Goals (default threading)\n")
        md += ["### Goals (default threading)", "", "```",
               *goal_lines(runs["all"], runs.get("one")), "```", ""]
    return md


def main() -> None:
    parser = H.make_parser(__doc__, repeats=5)
    parser.add_argument("--workloads", default="elementwise,dispatch,mlp,lennard_jones,gmm")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--keep-cache", action="store_true",
                        help="use the environment's TAPEJIT_CACHE_DIR and inductor cache")
    parser.add_argument("--markdown", metavar="PATH",
                        help="also write the tables and goal lines to PATH (bench/run_all.py)")
    H.add_child_flags(parser)
    args = H.parse_args(parser)
    names, peers = args.workloads.split(","), args.peers.split(",")
    unknown = ([n for n in names if n not in GOALS] + [p for p in peers if p not in PEERS])
    if unknown:
        parser.error(f"unknown workload or peer: {', '.join(unknown)}")
    if args.config:
        child(args, names, peers)
        return
    argv = (["--workloads", args.workloads, "--peers", args.peers, "--repeats",
             str(args.repeats), "--warmup", str(args.warmup)]
            + ["--quick"] * args.quick + ["--keep-cache"] * args.keep_cache)
    runs = {threads: H.run_child(os.path.abspath(__file__), argv, threads)
            for threads in H.threads_wanted(args.threads)}
    md = summary(runs)
    if args.markdown:
        with open(args.markdown, "w") as fh:
            fh.write("\n".join(md))
    if None in runs.values():
        raise SystemExit("a configuration failed (see above)")


if __name__ == "__main__":
    main()
