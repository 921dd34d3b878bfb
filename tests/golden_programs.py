"""The programs of the golden IR tests (tests/golden/*.txt), and the stages they are printed at.

Source lines in the goldens point into this file, so they change only when it does.
Stages: `primal` (the traced tape), `joint` (reverse mode's raw joint tape, before any pass,
with `ct_` names), `grad` (`make_tape(grad(f))`: the optimized joint tape as grad runs it).
"""
from __future__ import annotations

import numpy as np

import tapejit as tj
from tapejit import autodiff
from tapejit.ir import Tape
from tapejit.passes import fused, optimize


def mlp_loss(x, w, b, y):
    return np.mean((np.tanh(x @ w + b) - y) ** 2)


def logsumexp(x):
    m = np.max(x, axis=-1, keepdims=True)
    return np.sum(m[..., 0] + np.log(np.sum(np.exp(x - m), axis=-1)))


def index_assign_loss(x, w):
    h = x * w
    h[0] = 0.0  # clamp the first row
    h[:, 1] = h[:, 1] * 2.0
    return np.sum(h ** 2)


def lennard_jones(pos):
    diff = pos[:, None, :] - pos[None, :, :]          # (4, 4, 3) pair displacements
    r2 = np.sum(diff ** 2, axis=-1) + np.eye(4)        # eye keeps the diagonal finite
    inv6 = (1.0 / r2) ** 3
    energy = 4.0 * (inv6 ** 2 - inv6)
    return 0.5 * np.sum(energy * (1.0 - np.eye(4)))    # drop self-interaction


PROGRAMS = {
    "mlp_loss": (mlp_loss, (np.ones((8, 3)), np.ones((3, 2)), np.zeros(2), np.ones((8, 2))),
                 (1, 2)),
    "logsumexp": (logsumexp, (np.ones((5, 4)),), (0,)),
    "index_assign": (index_assign_loss, (np.ones((3, 4)), np.ones(4)), (0, 1)),
    "lennard_jones": (lennard_jones, (np.arange(12.0).reshape(4, 3),), (0,)),
}
STAGES = ("primal", "joint", "grad", "fused")


def stage(name: str, which: str) -> Tape:
    fn, args, argnums = PROGRAMS[name]
    primal = tj.make_tape(fn)(*args)
    if which == "primal":
        return primal
    if which == "joint":
        return autodiff.vjp_tape(primal, argnums, [autodiff.ONE])
    if which == "fused":    # the joint tape after every pass and fusion: what is compiled
        return fused(optimize(autodiff.vjp_tape(primal, argnums, [autodiff.ONE])))
    return tj.make_tape(tj.grad(fn, argnums=argnums))(*args)
