"""tapejit against its peers: the same gradients in JAX, PyTorch, HIPS autograd and by hand.

One process runs every workload on every peer that is installed (the others print "not
installed"; see bench/README.md to install them), checks each gradient against tapejit's (or the
hand-written one), times them in interleaved rounds (each round runs every peer once, so load
from other jobs falls on all alike), then prints per workload the median steady-state time, the
ratio to tapejit and the first two calls (trace + compile, where there is one: tapejit runs its
first call on the numpy interpreter and compiles on the second), and at the end one
Markdown table of them all, and `ratio <peer> / hand-written` lines (tapejit's against the
issue's goal). Workloads (float64; one core: the harness pins the process to one CPU, so JAX's
and torch's threads share it):

  elementwise     grad of sum(sin(x)*exp(-x*x) + tanh(x)*x), x of 10^6 elements
  dispatch        grad of sum(x*x), x of 10 elements (per-call overhead)
  mlp             grad of softmax cross-entropy of a 64-256-256-10 tanh MLP, 1,797 samples
  lennard_jones   grad of an all-pairs Lennard-Jones energy, 1,000 atoms (broadcasting)
  gmm             ADBench's GMM objective, d=10, K=25, n=10,000 random points: the gradient
                  w.r.t. (alphas, means, icf), and the gradient / objective time ratio;
                  hand-written: `gmm_grad_numpy` (numpy forward + backward, checked against
                  tapejit's gradient to rtol 1e-10); goal: tapejit <= 1.0x it

Peers: tapejit [numba] (`tj.grad`; objective: `tj.jit`; TAPEJIT_NUM_THREADS=1 unless set),
JAX `jit(grad)`, PyTorch eager autograd and `torch.compile` (forward compiled, AOTAutograd
backward), HIPS autograd (`autograd.grad`), and the hand-written gradient of bench/ (numpy or
@njit) where there is one.
First calls run on fresh caches: a new TAPEJIT_CACHE_DIR and TORCHINDUCTOR_CACHE_DIR
(--keep-cache uses the environment's).

    .venv/bin/python bench/peers.py                       # everything (~6 minutes)
    .venv/bin/python bench/peers.py --quick               # small sizes, 2 repeats
    .venv/bin/python bench/peers.py --workloads gmm,mlp --peers tapejit,jax
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import os

# every peer runs on one thread: tapejit's parallel loops too (before tapejit reads its config)
os.environ.setdefault("TAPEJIT_NUM_THREADS", "1")

import dataclasses  # noqa: E402
import math  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any, Callable  # noqa: E402

import numpy as np  # noqa: E402

PEERS = ("tapejit", "jax", "torch", "torch.compile", "autograd", "hand-written")
LABELS = {"tapejit": "tapejit [numba]", "jax": "JAX jit(grad)", "torch": "PyTorch eager",
          "torch.compile": "torch.compile", "autograd": "HIPS autograd",
          "hand-written": "hand-written"}
MODULES = {"jax": "jax", "torch": "torch", "torch.compile": "torch", "autograd": "autograd"}


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
    goal_vs_hand: float | None = None   # the goal for tapejit / hand-written
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
                        "@njit fused loop", goal_vs_hand=0.5)

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
                        tuple(range(6)), hand, "numpy fwd+bwd", goal_vs_hand=bench_mlp.GOAL)

    def make_lj() -> Workload:
        x = bench_lj.positions(5 if quick else 10)
        eye = np.eye(len(x), dtype=bool)
        return Workload("lennard_jones", f"grad of all-pairs Lennard-Jones energy, {len(x)} "
                        f"atoms", lennard_jones, [x, eye], (0,),
                        lambda: (-bench_lj.numba_energy_forces(x)[1],), "@njit pair loop",
                        goal_vs_hand=3.0)

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
                    hand_label="numpy fwd+bwd", objective=True, goal_vs_hand=1.0,
                    tapejit_rtol=1e-10)


# ---------------------------------------------------------------------------------------------
# the peers: each builds (gradient fn, objective fn or None) from a workload; both take no
# arguments, run once, and return numpy arrays


def build_tapejit(w: Workload) -> tuple[Callable, Callable | None, str]:
    import tapejit as tj

    def f(*args: Any) -> Any:
        return w.fn(np, *args)
    g = tj.grad(f, argnums=w.wrt, backend="numba")
    obj = tj.jit(f, backend="numba")
    return (lambda: g(*w.args)), (lambda: obj(*w.args)), "tapejit"


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
    return grad, objective, f"torch {torch.__version__}"


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


BUILDERS = {"tapejit": build_tapejit, "jax": build_jax,
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


def interleaved(fns: dict[str, Callable], repeats: int, min_run_s: float) -> dict[str, H.Timing]:
    """Per-call times of each function: warm-up calls, then `repeats` rounds in which every
    function runs once in turn, so that load from other jobs falls on all of them alike."""
    number = {k: H.measure(fn, 1, min_run_s=min_run_s).number for k, fn in fns.items()}
    runs: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
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


def print_workload(w: Workload, results: list[Result]) -> None:
    ref = next((r.grad.median for r in results if r.peer == "tapejit" and r.grad), None)
    rows = []
    for r in results:
        label = LABELS[r.peer] + (f" ({w.hand_label})" if w.hand_label and
                                   r.peer == "hand-written" else "")
        if r.grad is None:
            rows.append((label, "-", "-", "-", "-", "-", r.note))
            continue
        ratio = f"{r.grad.median / ref:.2f}x" if ref else "-"
        obj = (f"{H.fmt_time(r.objective.median)} ({r.grad.median / r.objective.median:.1f}x)"
               if r.objective else "-")
        rows.append((label, H.fmt_time(r.grad.median), ratio, H.fmt_time(r.first),
                     H.fmt_time(r.second), obj, r.note))
    heads = ("peer", "gradient", "x tapejit", "first call", "second call", "objective (grad/obj)",
             "note")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(heads)]
    print(f"\n{w.title}")
    for row in (heads, tuple("-" * n for n in widths), *rows):
        print("  " + "  ".join(c.rjust(n) if 0 < i < 6 else c.ljust(n)
                               for i, (c, n) in enumerate(zip(row, widths))).rstrip())


def hand_ratios(w: Workload, results: list[Result]) -> None:
    """`ratio <peer> / hand-written (<workload>)` lines: tapejit's against the issue's goal, the
    others' for comparison."""
    by = {r.peer: r for r in results if r.grad is not None}
    if "hand-written" not in by:
        return
    hand = by["hand-written"].grad.median
    for peer, r in by.items():
        if peer != "hand-written":
            H.ratio_line(f"{LABELS[peer]} / hand-written {w.hand_label} ({w.name})",
                         r.grad.median, hand, w.goal_vs_hand if peer == "tapejit" else None)


def markdown(all_results: dict[str, tuple[Workload, list[Result]]], peers: list[str]) -> str:
    """One table: a row per workload, a column per peer: median (x tapejit) / first call /
    second call."""
    lines = ["| workload | " + " | ".join(LABELS[p] for p in peers) + " |",
             "|---|" + "---:|" * len(peers)]
    for w, results in all_results.values():
        by = {r.peer: r for r in results}
        ref = by["tapejit"].grad.median if "tapejit" in by and by["tapejit"].grad else None
        cells = []
        for p in peers:
            r = by.get(p)
            if r is None or r.grad is None:
                cells.append("n/a" if r is None or r.note.startswith("none") else r.note[:20])
                continue
            ratio = f" ({r.grad.median / ref:.2f}x)" if ref else ""
            first = (f"<br>first {H.fmt_time(r.first)}, 2nd {H.fmt_time(r.second)}"
                     if p != "hand-written" else "")
            obj = (f"<br>grad/obj {r.grad.median / r.objective.median:.1f}x"
                   if r.objective else "")
            cells.append(f"{H.fmt_time(r.grad.median)}{ratio}{first}{obj}")
        lines.append(f"| {w.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = H.make_parser(__doc__, repeats=5)
    parser.add_argument("--workloads", default="elementwise,dispatch,mlp,lennard_jones,gmm")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--keep-cache", action="store_true",
                        help="use the environment's TAPEJIT_CACHE_DIR and inductor cache")
    args = H.parse_args(parser)
    makers = workloads(args.quick)
    names, peers = args.workloads.split(","), args.peers.split(",")
    unknown = [n for n in names if n not in makers] + [p for p in peers if p not in PEERS]
    if unknown:
        parser.error(f"unknown workload or peer: {', '.join(unknown)}")
    if not args.keep_cache:
        fresh = tempfile.mkdtemp(prefix="tapejit-peers-")
        os.environ["TAPEJIT_CACHE_DIR"] = os.path.join(fresh, "tapejit")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(fresh, "inductor")
    import run_all
    H.print_header("bench/peers.py: tapejit against JAX, PyTorch, HIPS autograd, by hand", args,
                   rows=", ".join(LABELS[p] for p in peers),
                   extra=f"TAPEJIT_NUM_THREADS={os.environ['TAPEJIT_NUM_THREADS']}; "
                         f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
                         f"{run_all.cpu_model()}; load average {run_all.loadavg()}")
    all_results = {}
    for name in names:
        w = makers[name]()
        want = [np.asarray(g) for g in w.hand()] if w.hand else None
        results = []
        for peer in peers:
            res, want = prepare(peer, w, want)
            results.append(res)
            H.flush()
        time_all(results, w, args.repeats)
        print_workload(w, results)
        hand_ratios(w, results)
        all_results[name] = (w, results)
    print(f"\nload average after: {run_all.loadavg()}")
    print("\nMedians of the gradient (x tapejit [numba]), first calls, and for gmm the ratio "
          "gradient / objective:\n")
    print(markdown(all_results, peers))


if __name__ == "__main__":
    main()
