"""The repeated steps of a traced tape: each eqn's signature, where each step reads its inputs
from, and the runs of steps that re-rolling (reroll.py, which describes the rules) turns into
scans. Finding runs is linear in the tape's size for each period found.

A step reads each input from its own eqns ("in"), the step before ("prev": a carry), a value
from before the run that every step reads ("out": an invariant), a literal ("lit"), a constant
array ("const") or a slice of an array from before the run ("rows"): the last two may differ
from step to step (the rows of a data array a loop walks over). A `slice` eqn's start and limit
are not part of its signature, so `xs[i]` for a Python int `i` matches across steps; a slice
that moves from step to step must read a value from before the run.
In the layers: with control flow, below reroll.py.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np

from ..ir import Atom, Eqn, Lit, Tape, Var
from ..ops import layout as L

MIN_STEPS = 3       # the least number of steps re-rolled
MIN_SAVED = 16      # the least number of eqns a re-roll removes
SMALL_CONST = 4096  # bytes: a constant compared by a key of its bytes
SLICE, RESHAPE = L.slice_.name, L.reshape.name


class Run(NamedTuple):
    """Blocks `first..end-1` of `period` eqns counted from eqn `start` (block j starts at
    start + j * period): the steps of one loop."""

    start: int
    period: int
    first: int
    end: int

    def begin(self, j: int) -> int:
        return self.start + j * self.period

    @property
    def steps(self) -> int:
        return self.end - self.first

    @property
    def span(self) -> range:
        return range(self.begin(self.first), self.begin(self.end))


class Index:
    """One tape's eqn signatures, where each var is defined and the last eqn that reads it
    (len(eqns) for an output of the tape), the constants' values, and for each constant the
    first one equal to it (each step of `x[np.array([0, 2])]` records a new constant)."""

    def __init__(self, tape: Tape) -> None:
        self.eqns = tape.eqns
        self.same_const = _first_equal_consts(tape)
        self.const_values = {v.name: c for v, c in zip(tape.constvars, tape.consts)
                             if isinstance(c, np.ndarray)}
        self.defined: dict[str, tuple[int, int]] = {}
        self.last_read: dict[str, int] = {}
        ids: dict[Any, int] = {}
        self.sigs: list[int] = []           # what matches across steps
        self.exact: list[int] = []          # the same, slices with their start: for periods
        for i, eqn in enumerate(tape.eqns):
            for a in eqn.ins:
                if type(a) is Var:
                    self.last_read[a.name] = i
            for k, out in enumerate(eqn.outs):
                self.defined[out.name] = (i, k)
            self.sigs.append(_sig_id(eqn, ids, moving=True))
            self.exact.append(_sig_id(eqn, ids, moving=False))
        for out in tape.outvars:
            if type(out) is Var:
                self.last_read[out.name] = len(tape.eqns)

    def reads(self, j: int, run: Run) -> list[Atom]:
        """Every input of block j, in order (constants as the first one equal to them)."""
        same = self.same_const
        return [same.get(a.name, a) if type(a) is Var else a
                for e in self.eqns[run.begin(j):run.begin(j + 1)] for a in e.ins]

    def pattern(self, j: int, run: Run) -> tuple:
        """Where block j reads each input (the module docstring's kinds): ("in", eqn, out) of
        the block itself, ("prev", eqn, out) of the block before, ("out", name), ("lit",),
        ("const",), ("rows", array name); a slice that moves from block j-1 to j reading
        anything but an "out" value: ("moving", j), which matches no other block."""
        begin, p, before = run.begin(j), run.period, run.begin(run.first)
        kinds = []
        for e in range(begin, begin + p):
            eqn = self.eqns[e]
            for a in eqn.ins:
                kinds.append(self._kind(self.same_const.get(a.name, a) if type(a) is Var
                                        else a, begin, p, before))
            if (eqn.op == SLICE and kinds[-1][0] != "out" and j > run.first
                    and eqn.params != self.eqns[e - p].params):
                kinds[-1] = ("moving", j)
        return tuple(kinds)

    def _kind(self, a: Atom, begin: int, p: int, before: int) -> tuple:
        if type(a) is Lit:
            return ("lit",)
        at = self.defined.get(a.name)
        if at is not None and begin <= at[0] < begin + p:
            return ("in", at[0] - begin, at[1])
        if at is not None and begin - p <= at[0] < begin:
            return ("prev", at[0] - begin + p, at[1])
        if a.name in self.const_values:
            return ("const",)
        cut = self.slice_of(a) if at is not None and at[0] < before else None
        return ("rows", cut.ins[0].name) if cut is not None else ("out", a.name)

    def slice_of(self, var: Var) -> Eqn | None:
        """The slice eqn whose output `var` is, reshaped or not."""
        at = self.defined.get(var.name)
        while at is not None and self.eqns[at[0]].op == RESHAPE:
            source = self.eqns[at[0]].ins[0]
            at = self.defined.get(source.name) if type(source) is Var else None
        return self.eqns[at[0]] if at is not None and self.eqns[at[0]].op == SLICE else None


def _first_equal_consts(tape: Tape) -> dict[str, Var]:
    """Each constant's first equal one, equal to the bit. A constant of up to SMALL_CONST
    bytes is keyed by its bytes; a larger one (a data array the loop reads: copying MNIST's
    376 MB took 0.35 s of a trace) is compared only with the earlier ones of its dtype and
    shape, first by where its elements are. (A constant of a tape traced inside another
    trace may be that trace's tracer: kept.)"""
    first: dict[tuple, Var] = {}
    large: dict[tuple, list[tuple[Var, np.ndarray]]] = defaultdict(list)
    same = {}
    for var, value in zip(tape.constvars, tape.consts):
        if not isinstance(value, np.ndarray):
            continue
        kind = (value.dtype.str, value.shape)
        if value.nbytes <= SMALL_CONST:
            same[var.name] = first.setdefault((*kind, value.tobytes()), var)
            continue
        twins = large[kind]
        same[var.name] = next((v for v, c in twins if _same_memory(c, value)
                               or c.tobytes() == value.tobytes()), var)
        if same[var.name] is var:
            twins.append((var, value))
    return same


def _same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether `a` and `b` (of one dtype and shape) are views of the same elements (a trace
    captures a fresh view of a data array at each `data[i]`)."""
    return a is b or (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                      and a.strides == b.strides)


def _sig_id(eqn: Eqn, ids: dict[Any, int], moving: bool) -> int:
    """Equal for eqns that may be the same eqn of two steps (an unhashable param: unique).
    `moving`: a slice's start and limit are left out (its output's shape says how much it
    takes), so `xs[t]` matches across steps."""
    params = eqn.params if eqn.op != SLICE or not moving else (("step", eqn.kw["step"]),)
    key = (eqn.op, params, tuple(a.aval for a in eqn.ins),
           tuple(o.aval for o in eqn.outs), eqn.src)
    try:
        return ids.setdefault(key, len(ids))
    except TypeError:
        ids[object()] = len(ids)
        return len(ids) - 1


# ---- finding runs ----------------------------------------------------------------------------
def _periods(sigs: Sequence[int]) -> dict[int, list[int]]:
    """Candidate periods (distances between consecutive eqns of one signature seen often
    enough for a run), each with the eqns at that distance from their previous twin (exact
    signatures: two slices of one line at different starts, `p[0]` and `p[1]`, are not a
    period)."""
    last: dict[int, int] = {}
    seeds: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(sigs):
        j = last.get(s)
        if j is not None:
            seeds[i - j].append(i)
        last[s] = i
    return {p: seeds[p] for p in sorted(seeds) if len(seeds[p]) >= MIN_STEPS - 1}


def _stretch(sigs: Sequence[int], claimed: list[bool], p: int, seed: int) -> range:
    """The longest range around eqns `seed - p` and `seed` in which every eqn's signature is
    that of the eqn p before (its first p eqns aside), none of it claimed by another run."""
    if any(claimed[seed - p:seed + 1]):
        return range(seed, seed)
    lo, hi, n = seed - p, seed + 1, len(sigs)
    while lo > 0 and not claimed[lo - 1] and sigs[lo - 1] == sigs[lo - 1 + p]:
        lo -= 1
    while hi < n and not claimed[hi] and sigs[hi] == sigs[hi - p]:
        hi += 1
    return range(lo, hi)


def find_runs(index: Index) -> list[Run]:
    """The runs worth re-rolling, shortest period first, none overlapping another."""
    claimed = [False] * len(index.eqns)
    runs = []
    for p, seeds in _periods(index.exact).items():
        done = -1
        for seed in seeds:
            if seed <= done:
                continue
            stretch = _stretch(index.sigs, claimed, p, seed)
            done = max(stretch.stop - 1, seed)
            for run in _loops_in(index, stretch.start, p, len(stretch) // p):
                runs.append(run)
                for i in run.span:
                    claimed[i] = True
    return sorted(runs, key=lambda r: r.begin(r.first))


def _loops_in(index: Index, start: int, p: int, k: int) -> Iterator[Run]:
    """The runs among k blocks of matching signatures: the longest stretches of blocks whose
    reads fit the block before them, each with the block before it where that fits."""
    if k < MIN_STEPS:
        return
    whole = Run(start, p, 0, k)
    patterns = [index.pattern(j, whole) for j in range(k)]
    u, taken = 1, 0
    while u < k:
        end = u + 1
        while end < k and patterns[end] == patterns[u]:
            end += 1
        first = u - 1 if u - 1 >= taken and _starts(index, whole, u - 1, patterns) else u
        run = _trimmed(index, whole._replace(first=first, end=end), patterns[u])
        if run is not None and _worth(run, taken_out(index, run, carried(patterns[u]))):
            yield run
        taken, u = end, end


def _starts(index: Index, run: Run, j: int, patterns: list[tuple]) -> bool:
    """Whether block j can be the first step of a loop whose steps read as block j+1 does:
    the same reads, except that where a step reads the step before, j reads any value from
    before it (the carry's initial value)."""
    reads = index.reads(j, run)
    for want, got, atom in zip(patterns[j + 1], patterns[j], reads):
        kind = want[0]
        if kind == "prev":
            fits = got[0] != "in"
        elif kind == "lit":
            fits = type(atom) is Lit
        elif kind == "out":
            fits = type(atom) is Var and atom.name == want[1]
        else:
            fits = got == want
        if not fits:
            return False
    return True


def carried(pattern: tuple) -> set[tuple[int, int]]:
    """The (eqn, output) of a step that the next step reads: its carries."""
    return {(kind[1], kind[2]) for kind in pattern if kind[0] == "prev"}


def _read_after(index: Index, run: Run) -> dict[int, list[tuple[int, int]]]:
    """Block -> the (eqn, output) of it that eqns after the run (or the tape's outputs) read."""
    end = run.begin(run.end)
    found: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for j in range(run.first, run.end):
        for e, eqn in enumerate(index.eqns[run.begin(j):run.begin(j + 1)]):
            for k, out in enumerate(eqn.outs):
                if index.last_read.get(out.name, -1) >= end:
                    found[j].append((e, k))
    return found


def _trimmed(index: Index, run: Run, pattern: tuple) -> Run | None:
    """`run`, without its last block when that block alone has values other than its carries
    read after the run (the step's result used once, after the loop)."""
    after = _read_after(index, run)
    last = [slot for slot in after.get(run.end - 1, []) if slot not in carried(pattern)]
    if last and set(after) == {run.end - 1}:
        run = run._replace(end=run.end - 1)
    return run if run.steps >= MIN_STEPS else None


def taken_out(index: Index, run: Run, carries: set[tuple[int, int]]
              ) -> list[tuple[int, tuple[int, int]]]:
    """(block, (eqn, output)) of the values read after the run that are taken out of its
    stacked ys: all but the last block's carries (the scan's carry outputs), unless that
    value is stacked anyway (a list of every step's state: then all its rows are ys')."""
    after = _read_after(index, run)
    last = run.end - 1
    stacked = {slot for j, slots in after.items() for slot in slots
               if j < last or slot not in carries}
    return [(j, slot) for j, slots in after.items() for slot in slots
            if j < last or slot in stacked]


def _worth(run: Run, taken: list) -> bool:
    """Whether re-rolling removes at least MIN_SAVED eqns (each value taken out of the ys
    costs two)."""
    return run.period * (run.steps - 1) - 2 * len(taken) >= MIN_SAVED
