"""Re-rolling: the repeated steps of a plain Python loop, recorded one after the other, become
one `scan` eqn (the `reroll` pass; transforms/traced.py runs it on traced tapes, before
reverse mode).

Tracing records every iteration of a Python `for` loop, so the tape, its reverse sweep and the
compile time grow with the step count. `reroll` finds a *run*: `k` consecutive blocks of `p`
eqns that repeat one step, and rewrites it as the scan `tj.fori_loop` would have recorded.

- Blocks match eqn by eqn on op, params (a slice's start aside), input and output avals and
  source line (a signature per eqn). Periods come from the distances between consecutive eqns
  of one signature, and a run grows from such a pair while the signatures `p` apart agree:
  linear in the tape's size for each period found (no search over every period and offset).
  Finding runs is repeats.py's.
- Dataflow decides what is a loop. Each input of a block is read from the same block (an
  intermediate of the step), from the block before it (a *carry*; the first block reads its
  initial value from before the run), from a value defined before the run that every block
  reads (a loop invariant: a scan const) or is a literal (the same in every block; else the
  literals of the blocks are stacked into a constant array: scan `xs`). The rows of an array
  a loop walks over are `xs` too (stacks.py makes them once, before the scan): a constant
  array or a slice of one array from before the run that differs from block to block, and a
  slice eqn whose start moves from block to block over a value from before the run (`xs[t]`).
  A block whose reads do not fit the block before it (it reads two steps back, a different
  invariant, or a moving slice of a value of the loop) starts a new run, so a first or last
  step that differs stays outside the loop, and nothing that does not fit is ever re-rolled.
- Eqns of a step that read only invariants and literals compute the same in every step: the
  first block's copy runs once, before the scan, which reads its values as invariants.
- Values of the run read after it: the last block's carries are the scan's carry outputs;
  other values become stacked `ys`, and each read value is taken out of its stack; a last
  block whose other values are read after the run (the loss of the last step) stays unrolled.
  A list of per-step results joined after the loop (`np.concatenate(outs)`, `np.stack`) reads
  the ys at once (stacks.joined_rows), and a later loop over them reads them as its xs.
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

import os
from typing import Any, Iterator, NamedTuple, Sequence

import numpy as np

from ..avals import Aval
from ..ir import Atom, Eqn, Lit, Tape, Var, dce, make_params, sub_tapes
from ..ops import layout as L
from ..passes.rewrite import fresh_names
from . import primitives as C
from .repeats import SLICE, Index, Run, carried, find_runs, taken_out
from .stacks import Stacks, joined_rows

MAX_ROUNDS = 8      # loops nested this deep re-roll (one level per round)
I64 = Aval((), np.dtype(np.int64))


class RerolledLoop(NamedTuple):
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


# ---- the scan of a run -----------------------------------------------------------------------
STACKED = ("lit", "const", "rows")      # reads that may differ from step to step: xs


class _Body:
    """The scan of one run being built from its second block (the template): the body's
    inputs by role, in order, with the operands the scan passes them, its eqns, and the eqns
    that compute the same value in every step (hoisted: the first block's copy runs once,
    before the loop)."""

    def __init__(self, stacks: Stacks) -> None:
        self.stacks = stacks
        self.carries: dict[tuple[int, int, Atom], Var] = {}   # (eqn, out, initial value)
        self.inits: list[Atom] = []
        self.xs: dict[tuple[Atom, ...], Var] = {}              # each step's value -> input
        self.consts: dict[Var, Var] = {}                       # invariant -> body input
        self.inner: dict[tuple[int, int], Var] = {}            # (eqn, out) -> body var
        self.hoisted: dict[tuple[int, int], Var] = {}          # (eqn, out) -> invariant
        self.eqns: list[Eqn] = []
        self.before: list[Eqn] = []                            # the hoisted eqns

    def operand(self, kind: tuple, atom: Atom, first: Atom, each: list[Atom]) -> Atom:
        """The body's atom for an input that the template reads as `atom` (the first block:
        `first`; every block, for reads that may differ from step to step: `each`)."""
        if kind[0] == "in":
            return self.value(kind[1:])
        if kind[0] == "prev":
            key = (kind[1], kind[2], first)
            if key not in self.carries:
                self.carries[key] = Var(f"carry{len(self.carries) + 1}", atom.aval)
                self.inits.append(first)
            return self.carries[key]
        if kind[0] == "out" or all(a == atom for a in each):
            return atom if type(atom) is Lit else self.const(atom)
        return self.step_value(tuple(each))

    def step_value(self, each: tuple[Atom, ...]) -> Var:
        """The input reading `each[j]` in step j."""
        return self.xs.setdefault(each, Var(f"xs{len(self.xs) + 1}", each[0].aval))

    def const(self, invariant: Var) -> Var:
        return self.consts.setdefault(invariant, Var(f"inv{len(self.consts) + 1}",
                                                     invariant.aval))

    def value(self, slot: tuple[int, int]) -> Var:
        """The body's var for output `slot` (eqn, out) of the template."""
        return self.const(self.hoisted[slot]) if slot in self.hoisted else self.inner[slot]

    def invariant(self, kinds: Sequence[tuple], each: dict[int, list[Atom]]) -> bool:
        """Whether an eqn reading `kinds` computes the same in every step."""
        return all(kind[0] == "out" or (kind[0] == "in" and kind[1:] in self.hoisted)
                   or (kind[0] in STACKED and len(set(each[n])) == 1)
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

    def operands(self, src: Any) -> list[Atom]:
        return [*self.inits, *(self.stacks.of(each, src) for each in self.xs), *self.consts]


class _Rewriter:
    """Re-rolls the runs of one tape. `made` maps each scan eqn re-rolling made (and its
    copies in the bodies of outer loops) to its RerolledLoop, across rounds."""

    def __init__(self, tape: Tape, index: Index,
                 made: dict[int, tuple[Eqn, RerolledLoop]]) -> None:
        self.tape, self.index, self.made = tape, index, made
        self.fresh = fresh_names(tape, "_")
        self.stacks = Stacks(index, self.fresh)

    def rewrite(self, runs: list[Run]) -> Tape:
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
        return dce(Tape(tape.invars, tuple(eqns), tape.outvars,
                        tape.constvars + tuple(self.stacks.constvars),
                        tape.consts + tuple(self.stacks.consts), reverse_start))

    def _scan(self, run: Run) -> list[Eqn]:
        """The hoisted eqns, the stacked xs and the scan eqn of `run`, then eqns taking the
        values read after it out of its ys."""
        index, template = self.index, run.first + 1
        step = index.eqns[run.begin(template):run.begin(template + 1)]
        pattern = index.pattern(template, run)
        taken = taken_out(index, run, carried(pattern))
        ys = list(dict.fromkeys(slot for _, slot in taken))
        body = self._body(run, step, pattern, set(ys))
        tape = body.tape(ys)      # (its carries first: the tape adds the inputs it reads)
        outs = self._carry_outs(run, body, {slot for j, slot in taken if j == run.end - 1}) + [
            Var(self.fresh("ys"), Aval((run.steps, *o.aval.shape), o.aval.dtype))
            for o in tape.outvars[len(body.carries):]]
        params = make_params(dict(body=tape, n_carry=len(body.carries), n_xs=len(body.xs),
                                  length=run.steps, reverse=False, checkpoints=None))
        operands = body.operands(step[0].src)
        scan = Eqn(C.scan.name, (Lit(run.steps, I64), *operands), tuple(outs), params,
                   step[0].src)
        self.made[id(scan)] = (scan, _describe(step, run, len(body.carries)))
        stacked = dict(zip(ys, outs[len(body.carries):]))
        return body.before + self.stacks.take_eqns() + [scan] + [
            e for j, slot in taken for e in self._take_out(run, j, slot, stacked[slot])]

    def _body(self, run: Run, step: Sequence[Eqn], pattern: tuple,
              stacked: set[tuple[int, int]]) -> _Body:
        """The template's eqns, reading the body's inputs as `pattern` says; those computing
        the same value in every step (and not `stacked` as ys) hoisted; a slice that moves
        from step to step (of a value from before the run) an input of stacked slices."""
        body = _Body(self.stacks)
        blocks = range(run.first, run.end)
        reads = [self.index.reads(j, run) for j in blocks]
        first = self.index.eqns[run.begin(run.first):run.begin(run.first + 1)]
        at = 0
        for e, eqn in enumerate(step):
            positions = range(at, at + len(eqn.ins))
            at = positions.stop
            kinds = pattern[positions.start:positions.stop]
            each = {i: [r[n] for r in reads] for i, n in enumerate(positions)
                    if kinds[i][0] in STACKED}
            copies = [self.index.eqns[run.begin(j) + e] for j in blocks]
            if eqn.op == SLICE and any(c.params != eqn.params for c in copies):
                body.inner[(e, 0)] = body.step_value(tuple(c.outs[0] for c in copies))
                continue
            if body.invariant(kinds, each) and not any((e, k) in stacked
                                                       for k in range(len(eqn.outs))):
                body.hoist(e, first[e])
                continue
            ins = [body.operand(kinds[i], reads[1][n], reads[0][n], each.get(i, []))
                   for i, n in enumerate(positions)]
            made = body.add(e, eqn, ins)
            if id(eqn) in self.made:          # an inner loop, now inside this one's body
                self.made[id(made)] = (made, self.made[id(eqn)][1])
        return body

    def _carry_outs(self, run: Run, body: _Body, taken: set[tuple[int, int]]) -> list[Var]:
        """The final carries, named as the last block's values (which later eqns read) unless
        those are `taken` out of the ys."""
        last = self.index.eqns[run.begin(run.end - 1):run.begin(run.end)]
        outs, used = [], set()
        for e, k, _ in body.carries:
            var = last[e].outs[k]
            fresh = var.name in used or (e, k) in taken
            outs.append(Var(self.fresh("carry"), var.aval) if fresh else var)
            used.add(var.name)
        return outs

    def _take_out(self, run: Run, j: int, slot: tuple[int, int], ys: Var) -> list[Eqn]:
        """`value = ys[j]` for the value of block j at `slot`: a slice and a reshape."""
        eqn = self.index.eqns[run.begin(j) + slot[0]]
        value, row = eqn.outs[slot[1]], j - run.first
        shape = value.aval.shape
        piece = Var(self.fresh("y"), Aval((1, *shape), value.aval.dtype))
        sliced = make_params(dict(start=(row,) + (0,) * len(shape), limit=(row + 1, *shape),
                                  step=(1,) * (len(shape) + 1)))
        return [Eqn(SLICE, (ys,), (piece,), sliced, eqn.src),
                Eqn(L.reshape.name, (piece,), (value,), make_params(dict(shape=shape)),
                    eqn.src)]


def _describe(step: Sequence[Eqn], run: Run, n_carry: int) -> RerolledLoop:
    file = next((e.src[0] for e in step if e.src is not None), None)
    lines = [e.src[1] for e in step if e.src is not None and e.src[0] == file] or [0]
    return RerolledLoop(file, (min(lines), max(lines)), run.steps, n_carry, run.period)


# ---- the pass --------------------------------------------------------------------------------
def reroll(tape: Tape) -> tuple[Tape, tuple[RerolledLoop, ...]]:
    """`tape` with each run of repeated steps as one scan, and what was re-rolled (outer
    loops before the loops in their bodies)."""
    made: dict[int, tuple[Eqn, RerolledLoop]] = {}
    for _ in range(MAX_ROUNDS):
        index = Index(tape)
        runs = find_runs(index)
        if not runs:
            break
        tape = joined_rows(_Rewriter(tape, index, made).rewrite(runs))
    return tape, tuple(_reported(tape, made))


def _reported(tape: Tape, made: dict[int, tuple[Eqn, RerolledLoop]]) -> Iterator[RerolledLoop]:
    for eqn in tape.eqns:
        if id(eqn) in made:
            yield made[id(eqn)][1]
        for _, body in sub_tapes(eqn):
            yield from _reported(body, made)
