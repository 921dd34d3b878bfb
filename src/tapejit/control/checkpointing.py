"""The checkpoint schedules of a loop's reverse sweep (loop_grad in primitives.py; its numba
code in code.py emits the same ones): which carries are kept, and how the others
are recomputed.

- None: every carry; k (an int): a snapshot every ceil(n / k) steps, each segment's carries
  recomputed from its snapshot into a buffer; "binomial": Revolve's binomial schedule on
  ceil(log2 n) + 2 snapshots, a stack of tasks (a, b, slot, free).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator


def policy_segment(n: int, checkpoints: Any) -> int:
    """The segment length of the stored-carries policy: 1 (store all) or ceil(n / k)."""
    return 1 if checkpoints is None else max(1, -(-n // int(checkpoints)))


def binomial_snapshots(n: int) -> int:
    """How many snapshots "binomial" keeps: ceil(log2(n)) + 1."""
    return max(1, math.ceil(math.log2(max(n, 2)))) + 1


def binomial_split(steps: int, snaps: int) -> int:
    """Revolve's first snapshot position for reversing `steps` steps with `snaps` snapshots:
    the smallest r with C(snaps + r, snaps) >= steps, then the offset C(snaps + r - 1, snaps)
    (clamped to the range)."""
    r = 0
    while math.comb(snaps + r, snaps) < steps:
        r += 1
    return min(max(1, math.comb(snaps + r - 1, snaps)), steps - 1)


def reversed_carries(n: int, carry: list[Any], advance: Callable[[list[Any], int], list[Any]],
                     checkpoints: Any) -> Iterator[tuple[int, list[Any]]]:
    """Yield `(k, carry before step k)` for k = n-1 down to 0, keeping carries by the policy
    (the interpreter's schedule; code.py emits the same one)."""
    if checkpoints == "binomial":
        yield from _binomial(n, carry, advance)
        return
    seg = policy_segment(n, checkpoints)
    snaps = []
    for k in range(n):
        if k % seg == 0:
            snaps.append(carry)
        carry = advance(carry, k)
    for start in range(((n - 1) // seg) * seg if n else -1, -1, -seg):
        states = [snaps[start // seg]]
        for k in range(start, min(start + seg, n) - 1):
            states.append(advance(states[-1], k))
        for k in range(min(start + seg, n) - 1, start - 1, -1):
            yield k, states[k - start]


def _binomial(n: int, carry: list[Any], advance: Callable) -> Iterator[tuple[int, list[Any]]]:
    snaps = [carry]                    # a stack of snapshots; task (a, b, slot, free) needs
    tasks = [(0, n, 0, binomial_snapshots(n))] if n else []   # snaps[slot]: carry before a
    while tasks:
        a, b, slot, free = tasks.pop()
        del snaps[slot + 1:]
        if b - a == 1:
            yield a, snaps[slot]
            continue
        if free == 0:                  # no snapshot left: recompute from a for each step
            for j in range(b - 1, a - 1, -1):
                c = snaps[slot]
                for k in range(a, j):
                    c = advance(c, k)
                yield j, c
            continue
        m = a + binomial_split(b - a, free)
        c = snaps[slot]
        for k in range(a, m):
            c = advance(c, k)
        snaps.append(c)
        tasks.append((a, m, slot, free))
        tasks.append((m, b, slot + 1, free - 1))
