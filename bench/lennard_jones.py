"""Lennard-Jones forces: gradient of an all-pairs energy of 1,000 atoms, written with broadcasting.

    d  = x[:, None, :] - x[None, :, :]             # (n, n, 3)
    r2 = sum(d * d, -1), the diagonal masked with np.where(eye, 1.0, r2)
    E  = sum over i<j of 4 (r^-12 - r^-6)          # = 2 * the masked sum over all i != j

Rows: tapejit `tj.value_and_grad(energy)` w.r.t. the positions with `backend="numba"`
("tapejit [numba]", the row the goal is about; its first, compiling call happens before timing
and is in the note) and with `backend="interpret"` ("tapejit [interpret]"); the reference, a hand-written `@njit` pair loop
(i<j, single thread) accumulating the energy and the forces; a hand-written numpy broadcast
forward + backward; JAX `jit(grad)` / PyTorch where installed. JAX and torch.compile were
measured elsewhere at 14x the Numba loop: printed as reference constants.
Goal: tapejit <= 3x the Numba loop. Both agree (energy and gradient = -forces) at startup.

    .venv/bin/python bench/lennard_jones.py [--side 10] [--repeats 7] [--quick [--with-numba]] [--no-numba]
"""
from __future__ import annotations

import _harness as H  # first: pins BLAS threads before numpy is imported

import numba
import numpy as np

import tapejit as tj

GOAL = 3.0
MEASURED_ELSEWHERE = 14.0    # JAX jit(grad) and torch.compile, x the Numba loop


def energy(x):
    n = x.shape[0]
    d = x[:, None, :] - x[None, :, :]
    r2 = np.sum(d * d, axis=-1)
    eye = np.eye(n, dtype=bool)
    inv2 = 1.0 / np.where(eye, 1.0, r2)
    inv6 = inv2 * inv2 * inv2
    e = np.where(eye, 0.0, inv6 * inv6 - inv6)
    return 2.0 * np.sum(e)        # 4 * (sum over i<j) = 4 * 0.5 * (sum over i != j)


@numba.njit(cache=True, nogil=True)
def numba_energy_forces(x):
    """Hand-written pair loop over i<j: the energy and the forces (-dE/dx)."""
    n = x.shape[0]
    forces = np.zeros_like(x)
    e = 0.0
    for i in range(n):
        xi, yi, zi = x[i, 0], x[i, 1], x[i, 2]
        fx, fy, fz = 0.0, 0.0, 0.0
        for j in range(i + 1, n):
            dx, dy, dz = xi - x[j, 0], yi - x[j, 1], zi - x[j, 2]
            inv2 = 1.0 / (dx * dx + dy * dy + dz * dz)
            inv6 = inv2 * inv2 * inv2
            e += inv6 * inv6 - inv6
            c = 24.0 * inv2 * (2.0 * inv6 * inv6 - inv6)     # -dE/dr2 * 2
            fx += c * dx
            fy += c * dy
            fz += c * dz
            forces[j, 0] -= c * dx
            forces[j, 1] -= c * dy
            forces[j, 2] -= c * dz
        forces[i, 0] += fx
        forces[i, 1] += fy
        forces[i, 2] += fz
    return 4.0 * e, forces


def numpy_value_and_grad(x):
    """Hand-written numpy broadcast forward + backward (no tape)."""
    n = x.shape[0]
    d = x[:, None, :] - x[None, :, :]
    r2 = np.einsum("ijk,ijk->ij", d, d)
    r2[np.diag_indices(n)] = 1.0
    inv2 = 1.0 / r2
    inv6 = inv2 * inv2 * inv2
    inv6[np.diag_indices(n)] = 0.0
    value = 2.0 * np.sum(inv6 * inv6 - inv6)
    c = 24.0 * inv2 * (2.0 * inv6 * inv6 - inv6)            # zero on the diagonal
    grad = -np.einsum("ij,ijk->ik", c, d)
    return value, grad


def positions(n_side: int, seed: int = 0) -> np.ndarray:
    """n_side^3 atoms on a jittered cubic lattice (spacing 1.5 sigma): no close contacts."""
    rng = np.random.default_rng(seed)
    g = np.arange(n_side) * 1.5
    x = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    return np.ascontiguousarray(x + rng.uniform(-0.1, 0.1, size=x.shape))


def main() -> None:
    parser = H.make_parser(__doc__, repeats=7)
    parser.add_argument("--side", type=int, default=None,
                        help="atoms per lattice side (default 10: 1,000 atoms; 5 with --quick)")
    args = H.parse_args(parser)
    side = args.side or (5 if args.quick else 10)
    x = positions(side)
    n = x.shape[0]
    H.print_header("bench/lennard_jones.py: all-pairs LJ energy gradient", args,
                   extra=f"{n} atoms, {n * (n - 1) // 2:,} pairs")

    ref_e, ref_f = numba_energy_forces(x)
    ref_g = -ref_f
    variants = H.tapejit_variants(args)
    main_label = H.main_label(variants)
    fns, notes = {}, {}
    for label, kw in variants:
        vg = tj.value_and_grad(energy, **kw)
        fc = H.first_call(label, vg, x)
        e, g = fc.result
        H.check_close(f"{label} energy vs numba pair loop", e, ref_e, rtol=1e-10)
        H.check_close(f"{label} gradient vs -(numba forces)", g, ref_g, rtol=1e-8, atol=1e-10)
        fns[label], notes[label] = vg, fc.note
    ne, ng = numpy_value_and_grad(x)
    H.check_close("numpy broadcast energy vs numba pair loop", ne, ref_e, rtol=1e-10)
    H.check_close("numpy broadcast gradient vs -(numba forces)", ng, ref_g, rtol=1e-8, atol=1e-10)

    ref_label = "numba pair loop (hand-written)"
    table = H.Table(f"energy + gradient w.r.t. positions, {n} atoms, float64", ref=ref_label,
                    ratio_name="x numba loop")
    for label, vg in fns.items():
        table.add(label, H.measure(lambda: vg(x), args.repeats),
                  goal=f"<= {GOAL:.1f}x numba loop" if label == main_label else "",
                  note=notes[label])
    table.add(ref_label, H.measure(lambda: numba_energy_forces(x), args.repeats),
              note="@njit, i<j, 1 thread")
    table.add("numpy broadcast fwd+bwd (hand-written)",
              H.measure(lambda: numpy_value_and_grad(x), args.repeats))
    table.add_constant("JAX jit(grad) (measured elsewhere)", ratio=MEASURED_ELSEWHERE,
                       note="reference constant")
    table.add_constant("torch.compile (measured elsewhere)", ratio=MEASURED_ELSEWHERE,
                       note="reference constant")

    def make_jax(jnp):
        def f(x):
            d = x[:, None, :] - x[None, :, :]
            r2 = jnp.sum(d * d, axis=-1)
            eye = jnp.eye(x.shape[0], dtype=bool)
            inv2 = 1.0 / jnp.where(eye, 1.0, r2)
            inv6 = inv2 * inv2 * inv2
            return 2.0 * jnp.sum(jnp.where(eye, 0.0, inv6 * inv6 - inv6))
        return f

    def make_torch(torch):
        def f(x):
            d = x[:, None, :] - x[None, :, :]
            r2 = torch.sum(d * d, dim=-1)
            eye = torch.eye(x.shape[0], dtype=torch.bool)
            inv2 = 1.0 / torch.where(eye, torch.ones_like(r2), r2)
            inv6 = inv2 * inv2 * inv2
            return 2.0 * torch.sum(torch.where(eye, torch.zeros_like(r2), inv6 * inv6 - inv6))
        return f

    H.framework_rows(table, [x], [0], [ref_g], args.repeats, make_jax=make_jax,
                     make_torch=make_torch, rtol=1e-8, atol=1e-10)
    table.print()
    H.ratio_line(f"{main_label} / numba pair loop", table.seconds(main_label),
                 table.seconds(ref_label), GOAL,
                 record={"workload": f"lennard_jones, {n} atoms", "row": main_label,
                         "reference": "hand-written @njit i<j pair loop",
                         "interpret_seconds": table.seconds(H.INTERPRET_LABEL),
                         "first_call": notes[main_label]})


if __name__ == "__main__":
    main()
