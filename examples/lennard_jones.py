"""A Lennard-Jones cluster: forces as -grad of the energy, a relaxation and molecular dynamics.

The energy is plain numpy over all pairs (reduced units: epsilon = sigma = mass = 1). tapejit
gives the forces, F = -dE/dx, with no hand-derived formula:

1. energy minimisation: the cluster, started on a jittered cubic lattice, relaxes under
   `tj.optimizers.Adam` until the largest force is small;
2. molecular dynamics: velocity Verlet from the relaxed cluster with random velocities. The
   whole step (half kick, drift, new forces by `tj.value_and_grad`, half kick) is one
   `tj.jit` program: one native call per time step. Total energy must be conserved: the run
   prints its relative drift and fails if it exceeds 1e-3.

    python examples/lennard_jones.py                  # 64 atoms, 2,000 MD steps
    python examples/lennard_jones.py --quick          # 8 atoms, a few steps (smoke test)
    python examples/lennard_jones.py --side 5 --steps 5000 --plot lj.png

With matplotlib installed (`pip install -e ".[examples]"`) it saves the energies over time to
--plot; otherwise it prints them.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import tapejit as tj


def energy(x: np.ndarray) -> np.ndarray:
    """4 * sum over pairs i<j of (r^-12 - r^-6), with r the distance between atoms i and j."""
    n = x.shape[0]
    d = x[:, None, :] - x[None, :, :]
    r2 = np.sum(d * d, axis=-1)
    eye = np.eye(n, dtype=bool)
    inv6 = (1.0 / np.where(eye, 1.0, r2)) ** 3       # the diagonal (i = i) masked out
    return 2.0 * np.sum(np.where(eye, 0.0, inv6 * inv6 - inv6))   # each pair counted twice


energy_and_grad = tj.value_and_grad(energy)


@tj.jit
def verlet_step(x: np.ndarray, v: np.ndarray, forces: np.ndarray, dt: float) -> tuple:
    """One velocity-Verlet step; `dt` is a run-time value (another dt does not recompile)."""
    v = v + 0.5 * dt * forces
    x = x + dt * v
    potential, grad = energy_and_grad(x)
    forces = -grad
    v = v + 0.5 * dt * forces
    return x, v, forces, potential


def lattice(side: int, spacing: float, jitter: float, rng: np.random.Generator) -> np.ndarray:
    grid = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), axis=-1)
    x = spacing * grid.reshape(-1, 3).astype(float)
    return x + rng.uniform(-jitter, jitter, size=x.shape)


def relax(x: np.ndarray, steps: int, tol: float) -> tuple[np.ndarray, int]:
    """Adam on the energy until the largest force is below `tol` (or `steps` steps)."""
    opt = tj.optimizers.Adam(1e-2)
    state = opt.init(x)
    for step in range(1, steps + 1):
        _, grad = energy_and_grad(x)
        if np.max(np.abs(grad)) < tol:
            break
        updates, state = opt.update(grad, state, x)        # optax's convention
        x = tj.optimizers.apply_updates(x, updates)
    return x, step


def plot(path: str, times: np.ndarray, pot: np.ndarray, kin: np.ndarray) -> bool:
    """Save the energies over time; False without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4))
    for values, label in ((pot, "potential"), (kin, "kinetic"), (pot + kin, "total")):
        ax.plot(times, values, label=label)
    ax.set(xlabel="time (reduced units)", ylabel="energy", title="Lennard-Jones cluster, NVE")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=int, default=4, help="atoms per lattice side")
    parser.add_argument("--steps", type=int, default=2000, help="MD steps")
    parser.add_argument("--dt", type=float, default=0.002)
    parser.add_argument("--temperature", type=float, default=0.05)
    parser.add_argument("--plot", default="lennard_jones.png")
    parser.add_argument("--quick", action="store_true", help="8 atoms, a few steps")
    args = parser.parse_args()
    side, steps = (2, 50) if args.quick else (args.side, args.steps)
    rng = np.random.default_rng(0)

    x = lattice(side, 1.12, 0.05, rng)
    t0 = time.perf_counter()
    e0, _ = energy_and_grad(x)
    print(f"{len(x)} atoms: E = {e0:.4f} on the jittered lattice "
          f"(first call: {time.perf_counter() - t0:.2f} s)")
    x, used = relax(x, 100 if args.quick else 5000, tol=1e-3)
    e1, grad = energy_and_grad(x)
    print(f"relaxed in {used} Adam steps: E = {e1:.4f}, max |F| = {np.max(np.abs(grad)):.1e}")

    v = rng.normal(scale=np.sqrt(args.temperature), size=x.shape)
    v -= v.mean(axis=0)                                   # no drift of the centre of mass
    forces, pot, kin = -grad, [e1], [0.5 * np.sum(v * v)]
    t0 = time.perf_counter()
    x, v, forces, e = verlet_step(x, v, forces, args.dt)   # traces and compiles
    first = time.perf_counter() - t0
    pot.append(e)
    kin.append(0.5 * np.sum(v * v))
    t0 = time.perf_counter()
    for _ in range(steps - 1):
        x, v, forces, e = verlet_step(x, v, forces, args.dt)
        pot.append(e)
        kin.append(0.5 * np.sum(v * v))
    per_step = (time.perf_counter() - t0) / max(steps - 1, 1)
    pot_a, kin_a = np.array(pot), np.array(kin)
    total = pot_a + kin_a
    drift = float(np.max(np.abs(total - total[0])) / abs(total[0]))
    print(f"MD: {steps} velocity-Verlet steps of dt = {args.dt}: first call {first:.2f} s, "
          f"then {1e6 * per_step:.1f} us per step (one native call each); "
          f"{verlet_step.cache_info()['traces']} trace")
    print(f"total energy {total[0]:.6f} -> {total[-1]:.6f}, max relative drift {drift:.1e}")
    times = args.dt * np.arange(len(total))
    if plot(args.plot, times, pot_a, kin_a):
        print(f"saved the energies over time to {args.plot}")
    else:
        for i in np.linspace(0, len(total) - 1, 6).astype(int):
            print(f"  t = {times[i]:7.3f}  potential {pot_a[i]:.5f}  kinetic {kin_a[i]:.5f}  "
                  f"total {total[i]:.6f}")
    assert drift < 1e-3, f"energy not conserved: relative drift {drift:.1e}"


if __name__ == "__main__":
    main()
