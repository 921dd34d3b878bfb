"""The thread form of a loop nest (codegen/cuda.py): one thread per element of the nest's
parallel axes (plan.parallel_axes), running the rest of the nest in its own loops as the CPU
runs one iteration: a short reduction (a row of 10 classes, xyz) needs no block and no
shared-memory tree, and a pair nest (a sum over j of a function of (i, j)) runs one thread per
i with a loop over j, where the block forms would launch a block per pair. A pair nest
summing over j per i and over i per j (a pairwise energy's gradient) becomes two such kernels,
one thread per i and then one per j (`pair_split`).

What a reduction of the nest becomes (`kind`):
- "stage": complete over its stage's inner axes: a register per pass over the stage, read by
  later stages as the block forms read it;
- "own": over every axis the thread loops over: a register, stored once at the end;
- "rmw": over some of them: accumulated in the thread's own elements of its output;
- "block": over every axis of its stage, the parallel ones included (a loss next to the
  rows): a register per thread, a block tree into the block's partial result, and a second
  kernel combining the blocks' (cuda_calls.emit_combine).
"""
from __future__ import annotations

import math

from ..ir import Eqn, Var
from ..passes.fuse import Loop
from .cuda_base import Generator, Reads, unravel, var_name
from .cuda_calls import emit_combine
from .cuda_nest import tree
from .plan import parallel_axes, serial_dims, short
from .scalar import combine_of, reduction_init
from .writer import comment, dtype_code, full_index


def thread_axes(g: Generator, loop: Loop, block_mode: str, block_outer: list[int]) -> \
        list[int] | None:
    """The parallel axes to give one thread each, or None to keep the block forms
    (`block_mode`, `block_outer`: what cuda_nest.Kernel would do):
    - the work of one thread is short (plan.short at every stage), or
    - the block forms would run one thread (serial), or a block per element of the whole
      domain with only short inner stages for its threads (a pair nest), and there are at
      least as many threads as domain steps per thread."""
    parallel = parallel_axes(loop)
    if not parallel or block_mode == "map":
        return None
    per_stage = serial_dims(loop, parallel)
    if all(short(dims) for dims in per_stage):
        return parallel
    if block_mode == "serial":
        return parallel
    rank = len(loop.domain)
    inner_short = all(short(stage[rank:]) for stage in loop.stages)
    threads = math.prod(loop.domain[a].size for a in parallel)
    steps = math.prod(n.size for a, n in enumerate(loop.domain) if a not in parallel)
    if len(block_outer) == rank and inner_short and threads >= steps:
        return parallel
    return None


def pair_split(g: Generator, loop: Loop, eqns: list[Eqn], block_outer: list[int]) -> \
        list[tuple[list[int], list[Eqn]]] | None:
    """A pair nest that sums over j per i and over i per j (a pairwise energy's gradient: no
    parallel axis) as two thread-form kernels, or None: the first one thread per i (with the
    sums over j and over everything), the second one thread per j (the sums over i),
    recomputing the pair values it needs. Each is (parallel axes, its eqns)."""
    rank = len(loop.domain)
    if rank != 2 or len(block_outer) != 2 or parallel_axes(loop) or \
            loop.domain[0].size != loop.domain[1].size or \
            not all(short(stage[rank:]) for stage in loop.stages):
        return None

    def everything(name: str) -> bool:
        return set(loop.reductions[name]) == set(range(len(loop.stages[loop.stage_of[name]])))

    sums = [e.outs[0].name for e in eqns if e.outs[0].name in loop.reductions]
    over_i = {n for n in sums if 0 in loop.reductions[n] and not everything(n)}
    if any(1 in loop.reductions[n] for n in over_i):
        return None
    first = _needed(eqns, [e for e in eqns if e.outs[0].name not in over_i and (
        e.outs[0].name in loop.reductions or e.outs[0].name in g.plan.arrays)])
    second = _needed(eqns, [e for e in eqns if e.outs[0].name in over_i])
    return [([0], first), ([1], second)]


def _needed(eqns: list[Eqn], roots: list[Eqn]) -> list[Eqn]:
    """The eqns of `eqns` that `roots` need (themselves included), in order."""
    producer = {e.outs[0].name: e for e in eqns}
    needed: set[str] = set()
    todo = [e.outs[0].name for e in roots]
    while todo:
        name = todo.pop()
        if name in needed:
            continue
        needed.add(name)
        todo += [a.name for a in producer[name].ins if isinstance(a, Var) and a.name in producer]
    return [e for e in eqns if e.outs[0].name in needed]


class ThreadKernel(Reads):
    """The thread-form kernel of one loop nest over its `parallel` axes; `stored`: values an
    earlier kernel of the same nest stored already (pair_split), recomputed, not stored."""

    def __init__(self, g: Generator, number: int, loop: Loop, eqns: list[Eqn],
                 parallel: list[int], name: str = "", stored: frozenset = frozenset()) -> None:
        super().__init__(g)
        self.number, self.loop, self.eqns, self.parallel = number, loop, eqns, parallel
        self.kname, self.stored = name or f"t_k{number}", stored
        # one long serial axis (a pair nest's j): split into chunks, each a thread's, so that
        # N threads become about TARGET_THREADS; sums over it go through per-chunk rows
        self.serial = [a for a in range(len(loop.domain)) if a not in parallel]
        self.chunked = len(self.serial) == 1 and not short((loop.domain[self.serial[0]],))
        self.idx = [f"t_i{d}" for d in range(max(len(s) for s in loop.stages))]

    def stage(self, eqn: Eqn) -> tuple:
        return self.loop.stages[self.loop.stage_of[eqn.outs[0].name]]

    def kind(self, eqn: Eqn) -> str | None:
        name = eqn.outs[0].name
        if name not in self.loop.reductions:
            return None
        stage, axes = self.stage(eqn), set(self.loop.reductions[name])
        if axes == set(range(len(stage))) and self.parallel:
            return "block"
        if stage != self.loop.domain and self.loop.complete(name):
            return "stage"
        return "own" if axes == set(range(len(stage))) - set(self.parallel) else "rmw"

    def extent(self, axes: list[int]) -> str:
        return self.g.sizes.product(self.loop.domain[a] for a in axes)

    def chunk_rows(self, eqn: Eqn) -> bool:
        """Whether reduction `eqn` sums over the chunked axis: into its rows, one per chunk."""
        return self.chunked and self.kind(eqn) in ("own", "rmw") and \
            self.serial[0] in self.loop.reductions[eqn.outs[0].name]

    def target(self, eqn: Eqn, parts: list[str]) -> str:
        """Where reduction `eqn` (own, rmw) accumulates at output position `parts`."""
        if not self.chunk_rows(eqn):
            return self.array(eqn.outs[0], parts)
        rows = f"t_p_{var_name(eqn.outs[0])}"
        if rows not in self.params:
            self.params.append(rows)
        return f"{rows}[{', '.join(['t_c'] + parts)}]"

    def stores(self, var: Var) -> bool:
        return var.name in self.g.plan.arrays and var.name not in self.stored

    def emit(self) -> None:
        name, g = self.kname, self.g
        blocks = [e for e in self.eqns if self.kind(e) == "block"]
        if self.chunked:
            self.params += ["t_nc", "t_cs"]
        body = self.body(blocks)
        n = self.extent(self.parallel)
        if self.chunked:
            along = self.extent(self.serial)
            g.driver.line(f"t_nc = tjrt.chunks({n}, {along})")
            g.driver.line(f"t_cs = -(-{along} // t_nc)")
            n = f"{n} * t_nc"
        if blocks:
            g.driver.line(f"t_nb{self.number} = tjrt.partial_grid(tjrt.blocks({n}))")
            launch = f"t_nb{self.number}, TPB"
        else:
            launch = f"tjrt.blocks({n}), TPB"
        for eqn in self.eqns:
            out = eqn.outs[0]
            if self.stores(out) or self.kind(eqn) in ("own", "rmw", "block"):
                g.allocate(out)
            rows = f"t_nb{self.number}" if self.kind(eqn) == "block" else \
                "t_nc" if self.chunk_rows(eqn) else None
            if rows is not None:
                g.driver.line(f"t_p_{var_name(out)} = tjrt.empty(({rows}, "
                              f"{g.sizes.shape(g.sizes.of(out))[1:]}, "
                              f"{dtype_code(out.aval.dtype)})")
        g.add_kernel(name, self.params, body)
        g.driver.line(f"{name}[{launch}]({', '.join(self.params + ['t_Sd'])})")
        for eqn in self.eqns:
            if self.kind(eqn) == "block" or self.chunk_rows(eqn):
                emit_combine(g, f"{name}_{var_name(eqn.outs[0])}", eqn)

    def body(self, blocks: list[Eqn]) -> list[str]:
        lines = [f"# thread form: one thread per element of axes {self.parallel}",
                 "t_tid = cuda.threadIdx.x"]
        for eqn in blocks:
            out, dtype = var_name(eqn.outs[0]), dtype_code(eqn.outs[0].aval.dtype)
            lines += [f"acc_sh_{out} = cuda.shared.array(TPB, {dtype})",
                      f"acc_{out} = {reduction_init(eqn)}"]
        n = self.extent(self.parallel)
        inner: list[str] = []
        if self.chunked:     # the thread's chunk, and its element of the parallel axes
            lines.append(f"for t_g in range(cuda.grid(1), {n} * t_nc, cuda.gridsize(1)):")
            inner += [f"t_b = t_g % ({n})", f"t_c = t_g // ({n})"]
        else:
            lines.append(f"for t_b in range(cuda.grid(1), {n}, cuda.gridsize(1)):")
        unravel(inner, "t_b", [self.idx[a] for a in self.parallel],
                [self.g.sizes(self.loop.domain[a]) for a in self.parallel])
        owned = [e for e in self.eqns if self.kind(e) == "own"]
        inner += [f"acc_{var_name(e.outs[0])} = {reduction_init(e)}" for e in owned]
        for eqn in self.eqns:
            if self.kind(eqn) == "rmw":
                inner += self.fill(eqn)
        loops: list[str] = []
        depth = ""
        for a in self.serial:
            extent = self.g.sizes(self.loop.domain[a])
            if self.chunked:    # (no min(): numba.cuda compiles it as a device function)
                loops += ["t_e = t_c * t_cs + t_cs", f"t_e = t_e if t_e < {extent} else {extent}"]
            span = "t_c * t_cs, t_e" if self.chunked else extent
            loops.append(f"{depth}for {self.idx[a]} in range({span}):")
            depth += "    "
        groups: list[list[Eqn]] = []
        for eqn in self.eqns:
            if not groups or self.stage(groups[-1][-1]) != self.stage(eqn):
                groups.append([])
            groups[-1].append(eqn)
        nest: list[str] = []
        for k, group in enumerate(groups):
            nest += self.group(k, group)
        inner += loops + [depth + line for line in nest]
        for eqn in owned:
            out = eqn.outs[0]
            inner.append(f"{self.target(eqn, self.kept(eqn, self.idx))} = acc_{var_name(out)}")
        lines += ["    " + line for line in inner]
        if blocks:
            lines += tree(0, blocks)
            for eqn in blocks:
                out = var_name(eqn.outs[0])
                partial = f"t_p_{out}"
                self.params.append(partial)
                kept = ", ".join(["cuda.blockIdx.x"] + self.kept(eqn, self.idx))
                lines += ["if t_tid == 0:", f"    {partial}[{kept}] = acc_{out}"]
        return lines

    def kept(self, eqn: Eqn, idx: list[str]) -> list[str]:
        here = full_index(eqn.ins[0].aval.shape, idx)
        return [here[d] for d in range(eqn.ins[0].aval.ndim) if d not in eqn.kw["axes"]]

    def fill(self, eqn: Eqn) -> list[str]:
        """The thread sets its own elements of what `eqn` accumulates in to the start value."""
        stage, axes = self.stage(eqn), set(self.loop.reductions[eqn.outs[0].name])
        idx = [self.idx[a] if a in self.parallel else f"t_z{a}" for a in range(len(stage))]
        lines, depth = [], ""
        for a in range(len(stage)):
            if a not in self.parallel and a not in axes:
                lines.append(f"{depth}for t_z{a} in range({self.g.sizes(stage[a])}):")
                depth += "    "
        target = self.target(eqn, self.kept(eqn, idx))
        return lines + [f"{depth}{target} = {reduction_init(eqn)}"]

    def group(self, k: int, group: list[Eqn]) -> list[str]:
        """One stage's eqns, in a loop over its inner axes if it has any."""
        stage = self.stage(group[0])
        idx = self.idx[:len(stage)]
        inner = list(range(len(self.loop.domain), len(stage)))
        if not inner:
            lines: list[str] = []
            for eqn in group:
                self.eqn(eqn, idx, lines)
            return lines
        accs = [e for e in group if self.kind(e) == "stage"]
        lines = [f"acc_{var_name(e.outs[0])} = {reduction_init(e)}" for e in accs]
        lines.append(f"for t_f{k} in range({self.g.sizes.product(stage[a] for a in inner)}):")
        body: list[str] = []
        unravel(body, f"t_f{k}", [idx[a] for a in inner], [self.g.sizes(stage[a]) for a in inner])
        for eqn in group:
            self.eqn(eqn, idx, body)
        lines += ["    " + line for line in body]
        for eqn in accs:
            out = eqn.outs[0]
            lines.append(f"t_{var_name(out)} = acc_{var_name(out)}")
            if self.stores(out):
                lines.append(f"{self.array(out, self.kept(eqn, idx))} = t_{var_name(out)}")
        for eqn in group:    # the stage's values are gone; its complete reductions remain
            if eqn in accs:
                self.local.add(eqn.outs[0].name)
            else:
                self.local.discard(eqn.outs[0].name)
        return lines

    def eqn(self, eqn: Eqn, idx: list[str], lines: list[str]) -> None:
        """One eqn at loop position `idx`."""
        out = eqn.outs[0]
        name = var_name(out)
        lines.append(comment(eqn, self.g.sizes))
        kind = self.kind(eqn)
        if kind is not None:
            x = eqn.ins[0]
            operand = self.read(x, full_index(x.aval.shape, idx))
            combine = combine_of(eqn)
            target = self.target(eqn, self.kept(eqn, idx)) if kind == "rmw" else f"acc_{name}"
            lines.append(f"{target} = {combine.format(target, operand)}")
            if kind == "own" and self.loop.complete(out.name):    # over no axis: done
                lines.append(f"t_{name} = acc_{name}")
                self.local.add(out.name)
            return
        here = full_index(out.aval.shape, idx)
        lines.append(f"t_{name} = {self.recompute(eqn, here)}")
        self.local.add(out.name)
        if self.stores(out):
            lines.append(f"{self.array(out, here)} = t_{name}")
