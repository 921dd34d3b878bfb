"""MLP training-step gradient: softmax cross-entropy of a 64-256-256-10 tanh MLP, 1,797 samples.

The data is scikit-learn's digits (1,797 8x8 images) when scikit-learn is installed, else random
data of the same shape. Rows:
  - tapejit `tj.value_and_grad(loss)` w.r.t. the parameter dict, with `backend="numba"`
    ("tapejit [numba]", the row the goal is about; its first, compiling call happens before
    timing and is in the note) and with `backend="interpret"` ("tapejit [interpret]");
  - a hand-written numpy forward + backward (the ratio reference; checked against tapejit's
    gradient at startup);
  - JAX `jit(grad)`, PyTorch eager autograd and `torch.compile`
    where installed;
  - tapejit [numba] and the hand-written numpy again, each alone in a fresh process (a child
    that builds the same data and times the same calls): numpy's time depends on the
    process's allocation history. Its temporaries of 3.7 MB each come from the heap that
    earlier work left behind (as in this process, after the interpreter's rows) or from fresh
    pages that fault in on every call (as in a script that only runs this loop). tapejit's
    temporaries live in a workspace allocated once.
Goal: tapejit <= 0.95x the hand-written numpy. Single-threaded BLAS.

    .venv/bin/python bench/mlp.py [--repeats 9] [--quick [--with-numba]] [--no-numba]

`loss`, `init_params` and `make_data` are imported by bench/compile.py too.
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np

import tapejit as tj

GOAL = 0.95
MARK = "RESULT "
OWN = ", own process"    # the label suffix of the rows measured in a fresh process
SIZES = (64, 256, 256, 10)
N_SAMPLES = 1797
QUICK_SIZES = (64, 32, 32, 10)
QUICK_SAMPLES = 200


def init_params(sizes=SIZES, seed: int = 0) -> dict[str, np.ndarray]:
    """Glorot-uniform weights, small random biases, as a dict pytree."""
    rng = np.random.default_rng(seed)
    params = {}
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        limit = np.sqrt(6.0 / (n_in + n_out))
        params[f"w{i}"] = rng.uniform(-limit, limit, size=(n_in, n_out))
        params[f"b{i}"] = rng.normal(scale=0.1, size=n_out)
    return params


def make_data(n: int = N_SAMPLES, sizes=SIZES, digits: bool = True, seed: int = 0):
    """(x, one-hot y, source): digits scaled to [0, 1] if available, else random data."""
    n_in, n_out = sizes[0], sizes[-1]
    if digits and H.have("sklearn") and n_in == 64 and n_out == 10:
        from sklearn.datasets import load_digits
        d = load_digits()
        x, y = d.data[:n] / 16.0, d.target[:n]
        source = "scikit-learn digits"
    else:
        rng = np.random.default_rng(seed)
        x, y = rng.uniform(0.0, 1.0, size=(n, n_in)), rng.integers(0, n_out, size=n)
        source = "random data (scikit-learn not installed)" if digits else "random data"
    return np.ascontiguousarray(x), np.eye(n_out)[y], source


def loss(params, x, y_onehot):
    """Mean softmax cross-entropy of a tanh MLP, with a numerically stable log-sum-exp."""
    h = x
    n_layers = len(params) // 2
    for i in range(1, n_layers):
        h = np.tanh(h @ params[f"w{i}"] + params[f"b{i}"])
    logits = h @ params[f"w{n_layers}"] + params[f"b{n_layers}"]
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return -np.mean(np.sum(y_onehot * log_probs, axis=1))


def numpy_value_and_grad(params, x, y_onehot):
    """Hand-written forward + backward of `loss` (no tape): the reference."""
    n_layers = len(params) // 2
    hs = [x]                                   # inputs of each layer
    h = x
    for i in range(1, n_layers):
        h = np.tanh(h @ params[f"w{i}"] + params[f"b{i}"])
        hs.append(h)
    logits = h @ params[f"w{n_layers}"] + params[f"b{n_layers}"]
    shifted = logits - np.max(logits, axis=1, keepdims=True)
    e = np.exp(shifted)
    s = np.sum(e, axis=1, keepdims=True)
    log_probs = shifted - np.log(s)
    n = x.shape[0]
    value = -np.sum(y_onehot * log_probs) / n
    # backward: d loss / d logits = (softmax - y) / n, then through the layers
    dz = e / s
    dz -= y_onehot
    dz /= n
    grads = {}
    for i in range(n_layers, 0, -1):
        h_in = hs[i - 1]
        grads[f"w{i}"] = h_in.T @ dz
        grads[f"b{i}"] = dz.sum(axis=0)
        if i > 1:
            dh = dz @ params[f"w{i}"].T
            dz = dh * (1.0 - h_in * h_in)      # tanh' = 1 - tanh^2, h_in is the tanh output
    return value, grads




def child(which: str, repeats: int, digits: bool) -> None:
    """In a fresh process: time `which` ("numpy" or "tapejit") and print the runs."""
    x, y, _ = make_data(N_SAMPLES, SIZES, digits=digits)
    params = init_params(SIZES)
    if which == "numpy":
        fn = numpy_value_and_grad
    else:
        fn = tj.value_and_grad(loss, backend="numba")
    timing = H.measure(lambda: fn(params, x, y), repeats)
    print(MARK + json.dumps(timing.runs), flush=True)


def own_process(which: str, repeats: int, digits: bool) -> H.Timing:
    """`child(which)` in a fresh process (it inherits the pin and the single-thread settings)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", which, "--repeats",
           str(repeats)] + ([] if digits else ["--random-data"])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
    if proc.returncode != 0:
        raise SystemExit(f"child {which} failed:\n{proc.stdout}{proc.stderr}")
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)][-1]
    return H.Timing.of(json.loads(line[len(MARK):]))


def main() -> None:
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        repeats = int(sys.argv[sys.argv.index("--repeats") + 1])
        child(sys.argv[i + 1], repeats, "--random-data" not in sys.argv)
        return
    parser = H.make_parser(__doc__, repeats=9)
    parser.add_argument("--random-data", action="store_true", help="random data, not digits")
    args = H.parse_args(parser)
    sizes, n = (QUICK_SIZES, QUICK_SAMPLES) if args.quick else (SIZES, N_SAMPLES)
    x, y, source = make_data(n, sizes, digits=not args.random_data)
    params = init_params(sizes)
    H.print_header("bench/mlp.py: MLP softmax cross-entropy value_and_grad", args,
                   extra=f"{'-'.join(map(str, sizes))} tanh MLP, {n} samples of {source}")

    ref_v, ref_g = numpy_value_and_grad(params, x, y)
    variants = H.tapejit_variants(args)
    main_label = H.main_label(variants)
    fns, notes = {}, {}
    for label, kw in variants:
        vg = tj.value_and_grad(loss, **kw)
        fc = H.first_call(label, vg, params, x, y)
        v, g = fc.result
        H.check_close(f"{label} value vs hand-written numpy", v, ref_v, rtol=1e-10)
        H.check_close(f"{label} gradient vs hand-written numpy backward", g, ref_g,
                      rtol=1e-7, atol=1e-12)
        fns[label], notes[label] = vg, fc.note

    ref_label = "numpy fwd+bwd (hand-written)"
    table = H.Table(f"value_and_grad of softmax cross-entropy, {'-'.join(map(str, sizes))} tanh "
                    f"MLP, {n} samples, float64", ref=ref_label, ratio_name="x numpy")
    for label, vg in fns.items():
        table.add(label, H.measure(lambda: vg(params, x, y), args.repeats),
                  goal=f"<= {GOAL:.2f}x numpy" if label == main_label else "", note=notes[label])
    table.add(ref_label, H.measure(lambda: numpy_value_and_grad(params, x, y), args.repeats))

    keys = sorted(params)
    flat = [params[k] for k in keys] + [x, y]
    nk = len(keys)

    def unflat(arrs):
        return dict(zip(keys, arrs))

    def make_jax(jnp):
        import jax

        def f(*a):
            return _framework_loss(jnp, lambda z: jax.nn.logsumexp(z, axis=1, keepdims=True),
                                   lambda z: jnp.sum(z, axis=1), unflat(a[:nk]), a[nk], a[nk + 1])
        return f

    def make_torch(torch):
        def f(*a):
            return _framework_loss(torch, lambda z: torch.logsumexp(z, dim=1, keepdim=True),
                                   lambda z: torch.sum(z, dim=1), unflat(a[:nk]), a[nk], a[nk + 1])
        return f

    H.framework_rows(table, flat, range(nk), [ref_g[k] for k in keys], args.repeats,
                     make_jax=make_jax, make_torch=make_torch, rtol=1e-7, atol=1e-12)
    own = not args.quick and main_label == H.NUMBA_LABEL
    if own:
        for label, which in ((main_label, "tapejit"), (ref_label, "numpy")):
            table.add(label + OWN, own_process(which, args.repeats, not args.random_data),
                      note="alone in a fresh process")
    table.print()
    H.ratio_line(f"{main_label} / numpy fwd+bwd", table.seconds(main_label),
                 table.seconds(ref_label), GOAL,
                 record={"workload": f"mlp {'-'.join(map(str, sizes))}, {n} samples",
                         "row": main_label, "reference": "hand-written numpy fwd+bwd",
                         "interpret_seconds": table.seconds(H.INTERPRET_LABEL),
                         "first_call": notes[main_label]})
    if own:
        H.ratio_line(f"{main_label} / numpy fwd+bwd, each alone in a fresh process",
                     table.seconds(main_label + OWN), table.seconds(ref_label + OWN),
                     record={"workload": f"mlp {'-'.join(map(str, sizes))}, {n} samples, each "
                                         f"alone in a fresh process",
                             "row": main_label + OWN,
                             "reference": "hand-written numpy fwd+bwd, own process"})


def _framework_loss(mod, logsumexp_rows, sum_rows, params, x, y):
    """`loss` written against jax.numpy / torch (only the gradient w.r.t. params is timed)."""
    n_layers = len(params) // 2
    h = x
    for i in range(1, n_layers):
        h = mod.tanh(h @ params[f"w{i}"] + params[f"b{i}"])
    logits = h @ params[f"w{n_layers}"] + params[f"b{n_layers}"]
    log_probs = logits - logsumexp_rows(logits)
    return -mod.mean(sum_rows(y * log_probs))


if __name__ == "__main__":
    main()
