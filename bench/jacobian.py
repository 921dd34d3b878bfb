"""Jacobian of a 100 -> 100 function (a tanh layer, tanh(W x + b)): tj.jacobian against a loop
of 100 VJP calls and JAX's jacrev.

Rows: `tj.jacobian(layer)` (one program computing every row: the forward once, then one
reverse sweep per output element seeded with a row of the identity) with `backend="numba"`
and `backend="interpret"`; the reference, a Python loop of 100 calls of the `vjp_fn` that
`tj.vjp(layer, x)` returned (each call runs the compiled joint program; the `tj.vjp` call that
makes it, which traces and differentiates, is outside the timing, so the loop is favoured); the analytic Jacobian in numpy (diag(1 - y^2) W) for scale; JAX
`jit(jacrev(layer))` where installed. All agree at startup.

A second table: `tj.jacfwd` against `tj.jacrev` (and JAX's `jit(jacfwd)`/`jit(jacrev)`) on
tanh(W x) with a wide input and a narrow output (n -> 4: reverse mode should win) and a narrow
input and a wide output (4 -> n: forward mode should win), in the same run.

    .venv/bin/python bench/jacobian.py [--n 100] [--repeats 7] [--quick [--with-numba]]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import numpy as np

import tapejit as tj

N, QUICK_N = 100, 20


def layer(x, w, b):
    return np.tanh(w @ x + b)


def vjp_rows(vjp_fn, n):
    """The Jacobian row by row: one call of `vjp_fn` per output element."""
    eye = np.eye(n)
    return np.stack([vjp_fn(eye[i])[0] for i in range(n)])


def analytic(x, w, b):
    y = layer(x, w, b)
    return (1.0 - y * y)[:, None] * w


def main() -> None:
    parser = H.make_parser(__doc__)
    parser.add_argument("--n", type=int, default=None, help=f"width (default {N})")
    args = H.parse_args(parser)
    n = args.n or (QUICK_N if args.quick else N)
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal(n), rng.standard_normal((n, n)) / np.sqrt(n), rng.standard_normal(n)
    H.print_header("bench/jacobian.py: Jacobian of a tanh layer", args, extra=f"{n} -> {n}")
    want = analytic(x, w, b)
    variants = H.tapejit_variants(args)
    main_label = H.main_label(variants)
    ref_label = f"loop of {n} vjp_fn calls [{variants[0][1]['backend']}]"
    table = H.Table(f"Jacobian of tanh(W x + b), {n} -> {n}, float64", ref=ref_label,
                    ratio_name="x vjp loop")
    for label, kw in variants:
        jac = tj.jacobian(layer, **kw)
        fc = H.first_call(label, jac, x, w, b)
        H.check_close(f"{label} vs analytic", fc.result, want, rtol=1e-10, atol=1e-12)
        table.add(label, H.measure(lambda: jac(x, w, b), args.repeats), note=fc.note)
    _, vjp_fn = tj.vjp(lambda v: layer(v, w, b), x, backend=variants[0][1]["backend"])
    H.check_close("vjp loop vs analytic", vjp_rows(vjp_fn, n), want, rtol=1e-10, atol=1e-12)
    table.add(ref_label, H.measure(lambda: vjp_rows(vjp_fn, n), args.repeats))
    table.add("numpy analytic diag(1-y^2) W", H.measure(lambda: analytic(x, w, b), args.repeats,
                                                        min_run_s=0.05))

    def build_jax():
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        jac = jax.jit(jax.jacrev(lambda v, w, b: jnp.tanh(w @ v + b)))
        H.check_close("jax jacrev vs analytic", np.asarray(jac(x, w, b)), want, rtol=1e-10,
                      atol=1e-12)
        return lambda: jac(x, w, b).block_until_ready()

    H.try_row(table, "jax jit(jacrev)", "jax", build_jax, args.repeats, min_run_s=0.05)
    table.print()
    record = {"workload": "jacobian", "row": main_label, "reference": ref_label}
    H.ratio_line(f"{main_label} / vjp loop", table.seconds(main_label), table.seconds(ref_label),
                 goal=1.0, record=record)
    H.ratio_line(f"{main_label} / jax jit(jacrev)", table.seconds(main_label),
                 table.seconds("jax jit(jacrev)"))
    modes(n, args, variants[0][1])


def modes(n: int, args, kw: dict) -> None:
    """jacfwd vs jacrev on a wide -> narrow and a narrow -> wide tanh(W x)."""
    rng = np.random.default_rng(1)
    table = H.Table(f"jacfwd vs jacrev, tanh(W x), float64 [{kw['backend']}]",
                    ref=f"jacrev {n} -> 4", ratio_name="x jacrev")
    for n_in, n_out in ((n, 4), (4, n)):
        w = rng.standard_normal((n_out, n_in)) / np.sqrt(n_in)
        x = rng.standard_normal(n_in)
        f = lambda v, w=w: np.tanh(w @ v)                       # noqa: E731
        want = (1.0 - f(x) ** 2)[:, None] * w
        for mode, transform in (("jacfwd", tj.jacfwd), ("jacrev", tj.jacrev)):
            jac = transform(f, **kw)
            label = f"{mode} {n_in} -> {n_out}"
            fc = H.first_call(label, jac, x)
            H.check_close(f"{label} vs analytic", fc.result, want, rtol=1e-10, atol=1e-12)
            table.add(label, H.measure(lambda: jac(x), args.repeats), note=fc.note)

        def build_jax(mode, w=w, x=x, want=want):
            import jax
            jax.config.update("jax_enable_x64", True)
            import jax.numpy as jnp
            jac = jax.jit(getattr(jax, mode)(lambda v: jnp.tanh(w @ v)))
            H.check_close(f"jax {mode} vs analytic", np.asarray(jac(x)), want, rtol=1e-10,
                          atol=1e-12)
            return lambda: jac(x).block_until_ready()

        for mode in ("jacfwd", "jacrev"):
            H.try_row(table, f"jax jit({mode}) {n_in} -> {n_out}", "jax",
                      lambda mode=mode: build_jax(mode), args.repeats, min_run_s=0.05)
    table.print()
    for mode in ("jacfwd", "jacrev"):
        H.ratio_line(f"tj.{mode} {n} -> 4 / jax jit({mode})", table.seconds(f"{mode} {n} -> 4"),
                     table.seconds(f"jax jit({mode}) {n} -> 4"))
        H.ratio_line(f"tj.{mode} 4 -> {n} / jax jit({mode})", table.seconds(f"{mode} 4 -> {n}"),
                     table.seconds(f"jax jit({mode}) 4 -> {n}"))


if __name__ == "__main__":
    main()
