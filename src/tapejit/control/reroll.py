"""Re-rolling: the repeated steps of a plain Python loop, recorded one after the other, become
one `scan` eqn (the `reroll` pass; programs.py runs it on traced tapes, before reverse mode).

Tracing records every iteration of a Python `for` loop, so the tape, its reverse sweep and the
compile time grow with the step count. `reroll` finds a *run*: `k` consecutive blocks of `p`
eqns that repeat one step, and rewrites it as the scan `tj.fori_loop` would have recorded.

- Blocks match eqn by eqn on op, params, input and output avals and source line (a signature
  per eqn). Periods come from the distances between consecutive eqns of one signature, and a
  run grows from such a pair while the signatures `p` apart agree: linear in the tape's size
  for each period found (no search over every period and offset).
- Dataflow decides what is a loop. Each input of a block is read from the same block (an
  intermediate of the step), from the block before it (a *carry*; the first block reads its
  initial value from before the run), from a value defined before the run that every block
  reads (a loop invariant: a scan const) or is a literal (the same in every block; else the
  literals of the blocks are stacked into a constant array: scan `xs`). A block whose reads do
  not fit the block before it (it reads two steps back, or a different invariant) starts a new
  run, so a first or last step that differs stays outside the loop, and nothing that does not
  fit is ever re-rolled.
- Eqns of a step that read only invariants and literals compute the same in every step: the
  first block's copy runs once, before the scan, which reads its values as invariants.
- Values of the run read after it: the last block's carries are the scan's carry outputs;
  other values become stacked `ys`, and each read value is taken out of its stack; a last
  block whose other values are read after the run (the loss of the last step) stays unrolled.
- A run of fewer than `MIN_STEPS` steps, or removing fewer than `MIN_SAVED` eqns (two more
  for each value taken out of the ys), is left as it is. Runs are re-rolled innermost first,
  then again on the result, so a loop whose body held an inner loop re-rolls once its body
  holds that loop's scan. Equal constant arrays count as one invariant (each step of
  `x[np.array([0, 2])]` records its own).

Scan bodies name their inputs `carry1..`, `xs1..` and `inv1..` (invariants), their
intermediates `v1..`: equal steps give equal bodies, which is what lets an outer loop re-roll.
In the layers: with control flow (it makes scans), above the passes.
"""
from __future__ import annotations

import dataclasses
import os
from collections import defaultdict
from typing import Any, Iterator, Sequence

import numpy as np

from ..avals import Aval
from ..ir import Atom, Eqn, Lit, Tape, Var, dce, make_params, sub_tapes
from ..ops import layout as L
from ..passes.rewrite import fresh_names
from . import primitives as C

MIN_STEPS = 3       # the least number of steps re-rolled
MIN_SAVED = 16      # the least number of eqns a re-roll removes
MAX_ROUNDS = 8      # loops nested this deep re-roll (one level per round)
I64 = Aval((), np.dtype(np.int64))


@dataclasses.dataclass(frozen=True)
class RerolledLoop:
    """What `reroll` made of one run (`tj.explain` and `cache_info()` report these)."""

    file: str | None        # the source file of the step's first eqn
    lines: tuple[int, int]  # the first and last line of the step in that file
    steps: int
    n_carry: int
    n_eqns: int             # eqns in one step

    def __str__(self) -> str:
        first, last = self.lines
        where = (f"{os.path.basename(self.file)}:{first}{f'-{last}' * (last != first)}"
                 if self.file is not None else "an unknown line")
        return (f"loop at {where}: {self.steps} steps of {self.n_eqns} eqns, "
                f"{self.n_carry} carries")


@dataclasses.dataclass(frozen=True)
class _Run:
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


class _Index:
    """One tape's eqn signatures, where each var is defined and the last eqn that reads it
    (len(eqns) for an output of the tape), and for each constant the first one equal to it
    (each step of `x[np.array([0, 2])]` records a new constant)."""

    def __init__(self, tape: Tape) -> None:
        self.eqns = tape.eqns
        self.same_const = _first_equal_consts(tape)
        self.defined: dict[str, tuple[int, int]] = {}
        self.last_read: dict[str, int] = {}
        ids: dict[Any, int] = {}
        self.sigs: list[int] = []
        for i, eqn in enumerate(tape.eqns):
            for a in eqn.ins:
                if type(a) is Var:
                    self.last_read[a.name] = i
            for k, out in enumerate(eqn.outs):
                self.defined[out.name] = (i, k)
            self.sigs.append(_sig_id(eqn, ids))
        for out in tape.outvars:
            if type(out) is Var:
                self.last_read[out.name] = len(tape.eqns)

    def reads(self, j: int, run: _Run) -> list[Atom]:
        """Every input of block j, in order (constants as the first one equal to them)."""
        same = self.same_const
        return [same.get(a.name, a) if type(a) is Var else a
                for e in self.eqns[run.begin(j):run.begin(j + 1)] for a in e.ins]

    def pattern(self, j: int, run: _Run) -> tuple:
        """Where block j reads each input: ("in", eqn, out) of the block itself, ("prev",
        eqn, out) of the block before, ("out", name) of a value from before both, ("lit",)."""
        begin, p = run.begin(j), run.period
        kinds = []
        for a in self.reads(j, run):
            if type(a) is Lit:
                kinds.append(("lit",))
                continue
            at = self.defined.get(a.name)
            if at is not None and begin <= at[0] < begin + p:
                kinds.append(("in", at[0] - begin, at[1]))
            elif at is not None and begin - p <= at[0] < begin:
                kinds.append(("prev", at[0] - begin + p, at[1]))
            else:
                kinds.append(("out", a.name))
        return tuple(kinds)


def _first_equal_consts(tape: Tape) -> dict[str, Var]:
    """(A constant of a tape traced inside another trace may be that trace's tracer: kept.)"""
    first: dict[tuple, Var] = {}
    same = {}
    for var, value in zip(tape.constvars, tape.consts):
        if isinstance(value, np.ndarray):
            key = (value.dtype.str, value.shape, value.tobytes())
            same[var.name] = first.setdefault(key, var)
    return same


def _sig_id(eqn: Eqn, ids: dict[Any, int]) -> int:
    """Equal for eqns that may be the same eqn of two steps (an unhashable param: unique)."""
    key = (eqn.op, eqn.params, tuple(a.aval for a in eqn.ins),
           tuple(o.aval for o in eqn.outs), eqn.src)
    try:
        return ids.setdefault(key, len(ids))
    except TypeError:
        ids[object()] = len(ids)
        return len(ids) - 1


# ---- finding runs ----------------------------------------------------------------------------
def _periods(sigs: Sequence[int]) -> dict[int, list[int]]:
    """Candidate periods (distances between consecutive eqns of one signature seen often
    enough for a run), each with the eqns at that distance from their previous twin."""
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


def _find_runs(index: _Index) -> list[_Run]:
    """The runs worth re-rolling, shortest period first, none overlapping another."""
    claimed = [False] * len(index.eqns)
    runs = []
    for p, seeds in _periods(index.sigs).items():
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


def _loops_in(index: _Index, start: int, p: int, k: int) -> Iterator[_Run]:
    """The runs among k blocks of matching signatures: the longest stretches of blocks whose
    reads fit the block before them, each with the block before it where that fits."""
    if k < MIN_STEPS:
        return
    whole = _Run(start, p, 0, k)
    patterns = [index.pattern(j, whole) for j in range(k)]
    u, taken = 1, 0
    while u < k:
        end = u + 1
        while end < k and patterns[end] == patterns[u]:
            end += 1
        first = u - 1 if u - 1 >= taken and _starts(index, whole, u - 1, patterns) else u
        run = _trimmed(index, dataclasses.replace(whole, first=first, end=end), patterns[u])
        if run is not None and _worth(run, _taken(index, run, _carried(patterns[u]))):
            yield run
        taken, u = end, end


def _starts(index: _Index, run: _Run, j: int, patterns: list[tuple]) -> bool:
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


def _carried(pattern: tuple) -> set[tuple[int, int]]:
    """The (eqn, output) of a step that the next step reads: its carries."""
    return {(kind[1], kind[2]) for kind in pattern if kind[0] == "prev"}


def _read_after(index: _Index, run: _Run) -> dict[int, list[tuple[int, int]]]:
    """Block -> the (eqn, output) of it that eqns after the run (or the tape's outputs) read."""
    end = run.begin(run.end)
    found: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for j in range(run.first, run.end):
        for e, eqn in enumerate(index.eqns[run.begin(j):run.begin(j + 1)]):
            for k, out in enumerate(eqn.outs):
                if index.last_read.get(out.name, -1) >= end:
                    found[j].append((e, k))
    return found


def _trimmed(index: _Index, run: _Run, pattern: tuple) -> _Run | None:
    """`run`, without its last block when that block alone has values other than its carries
    read after the run (the step's result used once, after the loop)."""
    carried = _carried(pattern)
    after = _read_after(index, run)
    last = [slot for slot in after.get(run.end - 1, []) if slot not in carried]
    if last and set(after) == {run.end - 1}:
        run = dataclasses.replace(run, end=run.end - 1)
    return run if run.steps >= MIN_STEPS else None


def _taken(index: _Index, run: _Run, carried: set[tuple[int, int]]
           ) -> list[tuple[int, tuple[int, int]]]:
    """(block, (eqn, output)) of the values read after the run that are taken out of its
    stacked ys: all but the last block's carries (the scan's carry outputs)."""
    return [(j, slot) for j, slots in _read_after(index, run).items() for slot in slots
            if j < run.end - 1 or slot not in carried]


def _worth(run: _Run, taken: list) -> bool:
    """Whether re-rolling removes at least MIN_SAVED eqns (each value taken out of the ys
    costs two)."""
    return run.period * (run.steps - 1) - 2 * len(taken) >= MIN_SAVED


# ---- the scan of a run -----------------------------------------------------------------------
class _Body:
    """The scan of one run being built from its second block (the template): the body's
    inputs by role, in order, with the operands the scan passes them, its eqns, and the eqns
    that compute the same value in every step (hoisted: the first block's copy runs once,
    before the loop)."""

    def __init__(self, stacks: "_Stacks") -> None:
        self.stacks = stacks
        self.carries: dict[tuple[int, int, Atom], Var] = {}   # (eqn, out, initial value)
        self.inits: list[Atom] = []
        self.xs: dict[tuple[Lit, ...], Var] = {}               # the blocks' literals
        self.consts: dict[Var, Var] = {}                       # invariant -> body input
        self.inner: dict[tuple[int, int], Var] = {}            # (eqn, out) -> body var
        self.hoisted: dict[tuple[int, int], Var] = {}          # (eqn, out) -> invariant
        self.eqns: list[Eqn] = []
        self.before: list[Eqn] = []                            # the hoisted eqns

    def operand(self, kind: tuple, atom: Atom, first: Atom, lits: list[Atom]) -> Atom:
        """The body's atom for an input that the template reads as `atom` (the first block:
        `first`; every block, for literals: `lits`)."""
        if kind[0] == "in":
            return self.value(kind[1:])
        if kind[0] == "prev":
            key = (kind[1], kind[2], first)
            if key not in self.carries:
                self.carries[key] = Var(f"carry{len(self.carries) + 1}", atom.aval)
                self.inits.append(first)
            return self.carries[key]
        if kind[0] == "out":
            return self.const(atom)
        if all(lit == atom for lit in lits):
            return atom
        return self.xs.setdefault(tuple(lits), Var(f"xs{len(self.xs) + 1}", atom.aval))

    def const(self, invariant: Var) -> Var:
        return self.consts.setdefault(invariant, Var(f"inv{len(self.consts) + 1}",
                                                     invariant.aval))

    def value(self, slot: tuple[int, int]) -> Var:
        """The body's var for output `slot` (eqn, out) of the template."""
        return self.const(self.hoisted[slot]) if slot in self.hoisted else self.inner[slot]

    def invariant(self, kinds: Sequence[tuple], lits: dict[int, list[Atom]]) -> bool:
        """Whether an eqn reading `kinds` computes the same in every step."""
        return all(kind[0] == "out" or (kind[0] == "in" and kind[1:] in self.hoisted)
                   or (kind[0] == "lit" and len(set(lits[n])) == 1)
                   for n, kind in enumerate(kinds))

    def hoist(self, e: int, first: Eqn) -> None:
        self.before.append(first)
        self.hoisted.update(((e, k), out) for k, out in enumerate(first.outs))

    def add(self, e: int, eqn: Eqn, ins: list[Atom]) -> Eqn:
        outs = []
        for k, out in enumerate(eqn.outs):
            self.inner[(e, k)] = Var(f"v{len(self.inner) + 1}", out.aval)
            outs.append(self.inner[(e, k)])
        made = Eqn(eqn.op, tuple(ins), tuple(outs), eqn.params, eqn.src)
        self.eqns.append(made)
        return made

    def tape(self, ys: Sequence[tuple[int, int]]) -> Tape:
        outs = [self.value(key[:2]) for key in self.carries] + [self.value(s) for s in ys]
        invars = (*self.carries.values(), *self.xs.values(), *self.consts.values())
        return dce(Tape(tuple(invars), tuple(self.eqns), tuple(outs)))

    def operands(self) -> list[Atom]:
        return [*self.inits, *(self.stacks.of(lits) for lits in self.xs), *self.consts]


class _Stacks:
    """The constants of stacked literals that one rewrite adds (one per sequence)."""

    def __init__(self, fresh: Any) -> None:
        self.fresh = fresh
        self.vars: dict[tuple[Lit, ...], Var] = {}
        self.arrays: list[np.ndarray] = []

    def of(self, lits: tuple[Lit, ...]) -> Var:
        if lits not in self.vars:
            aval = lits[0].aval
            self.arrays.append(np.array([lit.value for lit in lits], aval.dtype))
            self.vars[lits] = Var(self.fresh("steps"), Aval((len(lits), *aval.shape),
                                                            aval.dtype))
        return self.vars[lits]


class _Rewriter:
    """Re-rolls the runs of one tape. `made` maps each scan eqn re-rolling made (and its
    copies in the bodies of outer loops) to its RerolledLoop, across rounds."""

    def __init__(self, tape: Tape, index: _Index,
                 made: dict[int, tuple[Eqn, RerolledLoop]]) -> None:
        self.tape, self.index, self.made = tape, index, made
        self.fresh = fresh_names(tape, "_")
        self.stacks = _Stacks(self.fresh)

    def rewrite(self, runs: list[_Run]) -> Tape:
        tape, eqns, reverse_start = self.tape, [], None
        starts = {run.span.start: run for run in runs}
        i = 0
        while i < len(tape.eqns):
            run = starts.get(i)
            span = run.span if run is not None else range(i, i + 1)
            if tape.reverse_start is not None and tape.reverse_start in span:
                # (a marker only: where an inlined gradient's sweep began)
                reverse_start = len(eqns)
            eqns += self._scan(run) if run is not None else [tape.eqns[i]]
            i = span.stop
        if tape.reverse_start is not None and reverse_start is None:
            reverse_start = len(eqns)
        return Tape(tape.invars, tuple(eqns), tape.outvars,
                    tape.constvars + tuple(self.stacks.vars.values()),
                    tape.consts + tuple(self.stacks.arrays), reverse_start)

    def _scan(self, run: _Run) -> list[Eqn]:
        """The hoisted eqns and the scan eqn of `run`, then eqns taking the values read after
        it out of its ys."""
        index, template = self.index, run.first + 1
        step = index.eqns[run.begin(template):run.begin(template + 1)]
        pattern = index.pattern(template, run)
        taken = _taken(index, run, _carried(pattern))
        ys = list(dict.fromkeys(slot for _, slot in taken))
        body = self._body(run, step, pattern, set(ys))
        tape = body.tape(ys)      # (its carries first: the tape adds the inputs it reads)
        outs = self._carry_outs(run, body) + [
            Var(self.fresh("ys"), Aval((run.steps, *o.aval.shape), o.aval.dtype))
            for o in tape.outvars[len(body.carries):]]
        params = make_params(dict(body=tape, n_carry=len(body.carries), n_xs=len(body.xs),
                                  length=run.steps, reverse=False, checkpoints=None))
        scan = Eqn(C.scan.name, (Lit(run.steps, I64), *body.operands()), tuple(outs), params,
                   step[0].src)
        self.made[id(scan)] = (scan, _describe(step, run, len(body.carries)))
        stacked = dict(zip(ys, outs[len(body.carries):]))
        return body.before + [scan] + [e for j, slot in taken
                                       for e in self._take_out(run, j, slot, stacked[slot])]

    def _body(self, run: _Run, step: Sequence[Eqn], pattern: tuple,
              stacked: set[tuple[int, int]]) -> _Body:
        """The template's eqns, reading the body's inputs as `pattern` says; those computing
        the same value in every step (and not `stacked` as ys) hoisted."""
        body = _Body(self.stacks)
        reads = [self.index.reads(j, run) for j in range(run.first, run.end)]
        first = self.index.eqns[run.begin(run.first):run.begin(run.first + 1)]
        at = 0
        for e, eqn in enumerate(step):
            positions = range(at, at + len(eqn.ins))
            at = positions.stop
            kinds = pattern[positions.start:positions.stop]
            lits = {i: [r[n] for r in reads] for i, n in enumerate(positions)
                    if kinds[i][0] == "lit"}
            if body.invariant(kinds, lits) and not any((e, k) in stacked
                                                        for k in range(len(eqn.outs))):
                body.hoist(e, first[e])
                continue
            ins = [body.operand(kinds[i], reads[1][n], reads[0][n], lits.get(i, []))
                   for i, n in enumerate(positions)]
            made = body.add(e, eqn, ins)
            if id(eqn) in self.made:          # an inner loop, now inside this one's body
                self.made[id(made)] = (made, self.made[id(eqn)][1])
        return body

    def _carry_outs(self, run: _Run, body: _Body) -> list[Var]:
        """The final carries, named as the last block's values (which later eqns read)."""
        last = self.index.eqns[run.begin(run.end - 1):run.begin(run.end)]
        outs, used = [], set()
        for e, k, _ in body.carries:
            var = last[e].outs[k]
            outs.append(var if var.name not in used else Var(self.fresh("carry"), var.aval))
            used.add(var.name)
        return outs

    def _take_out(self, run: _Run, j: int, slot: tuple[int, int], ys: Var) -> list[Eqn]:
        """`value = ys[j]` for the value of block j at `slot`: a slice and a reshape."""
        eqn = self.index.eqns[run.begin(j) + slot[0]]
        value, row = eqn.outs[slot[1]], j - run.first
        shape = value.aval.shape
        piece = Var(self.fresh("y"), Aval((1, *shape), value.aval.dtype))
        sliced = make_params(dict(start=(row,) + (0,) * len(shape), limit=(row + 1, *shape),
                                  step=(1,) * (len(shape) + 1)))
        return [Eqn(L.slice_.name, (ys,), (piece,), sliced, eqn.src),
                Eqn(L.reshape.name, (piece,), (value,), make_params(dict(shape=shape)),
                    eqn.src)]


def _describe(step: Sequence[Eqn], run: _Run, n_carry: int) -> RerolledLoop:
    file = next((e.src[0] for e in step if e.src is not None), None)
    lines = [e.src[1] for e in step if e.src is not None and e.src[0] == file] or [0]
    return RerolledLoop(file, (min(lines), max(lines)), run.steps, n_carry, run.period)


# ---- the pass --------------------------------------------------------------------------------
def reroll(tape: Tape) -> tuple[Tape, tuple[RerolledLoop, ...]]:
    """`tape` with each run of repeated steps as one scan, and what was re-rolled (outer
    loops before the loops in their bodies)."""
    made: dict[int, tuple[Eqn, RerolledLoop]] = {}
    for _ in range(MAX_ROUNDS):
        index = _Index(tape)
        runs = _find_runs(index)
        if not runs:
            break
        tape = _Rewriter(tape, index, made).rewrite(runs)
    return tape, tuple(_reported(tape, made))


def _reported(tape: Tape, made: dict[int, tuple[Eqn, RerolledLoop]]) -> Iterator[RerolledLoop]:
    for eqn in tape.eqns:
        if id(eqn) in made:
            yield made[id(eqn)][1]
        for _, body in sub_tapes(eqn):
            yield from _reported(body, made)
