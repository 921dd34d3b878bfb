"""The kernel of one fused loop nest, in one of the shapes codegen/cuda.py describes (map,
block, block with partial results, serial), and the block-level tree reduction."""
from __future__ import annotations

from ..ir import Eqn
from ..passes.fuse import Loop
from .scalar import combine_of, reduction_init
from .cuda_base import Generator, Reads, unravel, var_name
from .cuda_calls import emit_combine
from .writer import comment, dtype_code, full_index


class Kernel(Reads):
    """The kernel of one loop nest; its shape (mode) as codegen/cuda.py describes."""

    def __init__(self, g: Generator, number: int, loop: Loop, eqns: list[Eqn]) -> None:
        super().__init__(g)
        self.number, self.loop, self.eqns = number, loop, eqns
        domain, rank = loop.domain, len(loop.domain)
        reductions = [e for e in eqns if e.outs[0].name in loop.reductions]
        main = [e for e in reductions if self.stage(e) == domain]
        reduced = {a for e in main for a in loop.reductions[e.outs[0].name]}
        staged = any(self.stage(e) != domain for e in eqns)
        inner = [(set(loop.reductions[e.outs[0].name]) - set(range(rank)),
                  set(range(rank, len(self.stage(e))))) for e in reductions if e not in main]
        complete = all(loop.complete(e.outs[0].name) for e in reductions if e not in main)
        uniform = all(set(loop.reductions[e.outs[0].name]) == reduced for e in main) and \
            complete
        # reductions over outer axes next to an inner stage's: each block combines its part
        # (over all or none of a stage's inner axes) into its row of partial results, and a
        # second kernel combines the rows
        self.partial = staged and bool(reduced or not complete) and \
            all(axes in (set(), stage_axes) for axes, stage_axes in inner)
        if not reductions and not staged:
            self.mode = "map"
        elif (uniform and not (reduced and staged)) or self.partial:
            self.mode = "block"
        else:
            self.mode = "serial"
        self.outer = [a for a in range(rank)
                      if a not in reduced or self.mode == "serial" or self.partial]
        # a reduction over the whole nest: every block takes a share, then combine the shares
        self.split = self.mode == "block" and not self.outer and not staged
        self.idx = [f"t_i{d}" for d in range(max(len(s) for s in loop.stages))]

    def stage(self, eqn: Eqn) -> tuple[int, ...]:
        return self.loop.stages[self.loop.stage_of[eqn.outs[0].name]]

    def extent(self, axes: list[int] | range, domain: tuple[int, ...]) -> str:
        return self.g.sizes.product(domain[a] for a in axes)

    def emit(self) -> None:
        name, blocks = f"t_k{self.number}", f"t_nb{self.number}"
        body = self.emit_map() if self.mode == "map" else self.emit_nest()
        domain = self.loop.domain
        if self.mode == "map":
            launch = f"tjrt.blocks({self.extent(range(len(domain)), domain)}), TPB"
        elif self.split:
            n = self.extent(range(len(domain)), domain)
            self.g.driver.line(f"{blocks} = tjrt.partial_grid(tjrt.blocks({n}))")
            launch = f"{blocks}, TPB"
        elif self.mode == "block":
            grid = "partial_grid" if self.partial else "grid"
            self.g.driver.line(f"{blocks} = tjrt.{grid}({self.extent(self.outer, domain)})")
            launch = f"{blocks}, TPB"
        else:
            launch = "1, 1"
        for eqn in self.eqns:
            out = eqn.outs[0]
            if out.name in self.g.plan.arrays or self.rmw(eqn):
                self.g.allocate(out)
            if self.shared_out(eqn):
                self.g.driver.line(f"t_p_{var_name(out)} = tjrt.empty(({blocks}, "
                                   f"{self.g.sizes.shape(self.g.sizes.of(out))[1:]}, "
                                   f"{dtype_code(out.aval.dtype)})")
            elif out.name in self.g.plan.arrays or self.rmw(eqn):
                self.array(out, [])
        self.g.add_kernel(name, self.params, body)
        self.g.driver.line(f"{name}[{launch}]({', '.join(self.params + ['t_Sd'])})")
        for eqn in self.eqns:
            if self.shared_out(eqn):
                emit_combine(self.g, f"{name}_{var_name(eqn.outs[0])}", eqn)

    def shared_out(self, eqn: Eqn) -> bool:
        """Whether reduction `eqn` leaves per-block partial results for a second kernel."""
        return (self.partial and self.rmw(eqn)) or \
            (self.split and eqn.outs[0].name in self.loop.reductions)

    def emit_map(self) -> list[str]:
        domain = self.loop.domain
        n = self.extent(range(len(domain)), domain)
        lines = [f"for t_f in range(cuda.grid(1), {n}, cuda.gridsize(1)):"]
        inner: list[str] = []
        unravel(inner, "t_f", self.idx[:len(domain)],
                 [self.g.sizes(m) for m in domain])
        for eqn in self.eqns:
            self.emit_eqn(eqn, self.idx[:len(domain)], inner, guard=False)
        return lines + ["    " + line for line in inner]

    def acc(self, eqn: Eqn) -> bool:
        """Whether reduction `eqn` accumulates in registers over all the axes the block's
        threads stride over (and a tree reduction across the block)."""
        name = eqn.outs[0].name
        segment = set(self.segment(self.stage(eqn)))
        return name in self.loop.reductions and bool(segment) and \
            segment <= set(self.loop.reductions[name])

    def rmw(self, eqn: Eqn) -> bool:
        """Whether reduction `eqn` (also) accumulates in memory (`target`): over axes the
        blocks iterate, or (serial mode) over part of a stage's."""
        name = eqn.outs[0].name
        if name not in self.loop.reductions:
            return False
        return not self.acc(eqn) or \
            not set(self.loop.reductions[name]) <= set(self.segment(self.stage(eqn)))

    def segment(self, stage: tuple[int, ...]) -> list[int]:
        """The axes (of `stage`) the threads of a block stride over."""
        rank = len(self.loop.domain)
        if stage == self.loop.domain:
            return [a for a in range(rank) if a not in self.outer]
        return list(range(rank, len(stage)))

    def emit_nest(self) -> list[str]:
        domain = self.loop.domain
        threads = "TPB" if self.mode == "block" else "1"
        lines = ["t_tid = cuda.threadIdx.x"]
        for eqn in self.eqns:
            if self.acc(eqn) and threads != "1":
                lines.append(f"acc_sh_{var_name(eqn.outs[0])} = cuda.shared.array("
                             f"{threads}, {dtype_code(eqn.outs[0].aval.dtype)})")
            if self.rmw(eqn):
                lines += self.fill(eqn, threads)
        body: list[str] = []
        unravel(body, "t_b", [self.idx[a] for a in self.outer],
                 [self.g.sizes(domain[a]) for a in self.outer])
        groups: list[list[Eqn]] = []
        for eqn in self.eqns:
            if not groups or self.stage(groups[-1][-1]) != self.stage(eqn):
                groups.append([])
            groups[-1].append(eqn)
        for k, group in enumerate(groups):
            body += self.emit_group(k, group, threads)
        if self.split:
            return lines + body
        n = self.extent(self.outer, domain)
        lines.append(f"for t_b in range(cuda.blockIdx.x, {n}, cuda.gridDim.x):")
        return lines + ["    " + line for line in body]

    def target(self, eqn: Eqn, parts: list[str]) -> str:
        """Where reduction `eqn` accumulates at output position `parts`: its output (serial
        mode), or the block's row of its partial results."""
        if not (self.partial or self.split):
            return self.array(eqn.outs[0], parts)
        name = f"t_p_{var_name(eqn.outs[0])}"
        if name not in self.params:
            self.params.append(name)
        return f"{name}[{', '.join(['cuda.blockIdx.x'] + parts)}]"

    def fill(self, eqn: Eqn, threads: str) -> list[str]:
        """The block's threads set what `eqn` accumulates in to the reduction's start value."""
        shape = eqn.outs[0].aval.shape
        names = [f"t_z{d}" for d in range(len(shape))]
        lines = [f"for t_zf in range(t_tid, {self.g.sizes.product(shape)}, {threads}):"]
        inner: list[str] = []
        unravel(inner, "t_zf", names, [self.g.sizes(n) for n in shape])
        inner.append(f"{self.target(eqn, names)} = {reduction_init(eqn)}")
        return lines + ["    " + line for line in inner] + ["cuda.syncthreads()"]

    def emit_group(self, k: int, group: list[Eqn], threads: str) -> list[str]:
        """One stage's eqns: by every thread (outer values) or strided over its segment."""
        stage = self.stage(group[0])
        axes = self.segment(stage)
        idx = self.idx[:len(stage)]
        if not axes:
            lines: list[str] = []
            for eqn in group:
                self.emit_eqn(eqn, idx, lines, guard=True)
            return lines
        accs = [e for e in group if self.acc(e)]
        lines = [f"acc_{var_name(e.outs[0])} = {reduction_init(e)}" for e in accs]
        start, step = ("cuda.blockIdx.x * TPB + t_tid", "TPB * cuda.gridDim.x") if self.split \
            else ("t_tid", threads)
        lines.append(f"for t_f{k} in range({start}, {self.extent(axes, stage)}, {step}):")
        inner: list[str] = []
        unravel(inner, f"t_f{k}", [idx[a] for a in axes],
                 [self.g.sizes(stage[a]) for a in axes])
        for eqn in group:
            self.emit_eqn(eqn, idx, inner, guard=False)
        lines += ["    " + line for line in inner]
        if accs and threads != "1":
            lines += tree(k, accs)
        for eqn in accs:
            out = eqn.outs[0]
            lines.append(f"t_{var_name(out)} = acc_{var_name(out)}")
            if self.split:         # the block's share
                lines += ["if t_tid == 0:",
                          f"    {self.target(eqn, self.kept(eqn, idx))} = t_{var_name(out)}"]
            elif self.rmw(eqn):    # the block's part of a reduction over outer axes too
                target = self.target(eqn, self.kept(eqn, idx))
                combine = combine_of(eqn)
                lines += ["if t_tid == 0:",
                          f"    {target} = {combine.format(target, f't_{var_name(out)}')}"]
            elif out.name in self.g.plan.arrays:
                kept = self.kept(eqn, idx)
                lines += ["if t_tid == 0:", f"    {self.array(out, kept)} = t_{var_name(out)}"]
        if stage != self.loop.domain:
            lines.append("cuda.syncthreads()")     # later stages read what this one stored
        for eqn in group:    # the stage's values are gone; its complete reductions remain
            name = eqn.outs[0].name
            if eqn in accs and not self.rmw(eqn):
                self.local.add(name)
            else:
                self.local.discard(name)
        return lines

    def kept(self, eqn: Eqn, idx: list[str]) -> list[str]:
        here = full_index(eqn.ins[0].aval.shape, idx)
        return [here[d] for d in range(eqn.ins[0].aval.ndim) if d not in eqn.kw["axes"]]

    def emit_eqn(self, eqn: Eqn, idx: list[str], lines: list[str], guard: bool) -> None:
        """One eqn at loop position `idx`; `guard`: stores by thread 0 only."""
        out = eqn.outs[0]
        name = var_name(out)
        lines.append(comment(eqn, self.g.sizes))
        if out.name in self.loop.reductions:
            x = eqn.ins[0]
            operand = self.read(x, full_index(x.aval.shape, idx))
            combine = combine_of(eqn)
            if not self.acc(eqn):
                target = self.target(eqn, self.kept(eqn, idx))
                store = f"{target} = {combine.format(target, operand)}"
                lines += ["if t_tid == 0:", "    " + store] if guard else [store]
            else:
                lines.append(f"acc_{name} = {combine.format(f'acc_{name}', operand)}")
            return
        here = full_index(out.aval.shape, idx)
        lines.append(f"t_{name} = {self.recompute(eqn, here)}")
        self.local.add(out.name)
        if out.name in self.g.plan.arrays:
            store = f"{self.array(out, here)} = t_{name}"
            lines += ["if t_tid == 0:", "    " + store] if guard else [store]


def tree(k: int, accs: list[Eqn]) -> list[str]:
    """The block's tree reduction of the accumulators `accs`: every thread gets the results."""
    lines = [f"acc_sh_{var_name(e.outs[0])}[t_tid] = acc_{var_name(e.outs[0])}" for e in accs]
    lines += ["cuda.syncthreads()", f"t_s{k} = TPB // 2", f"while t_s{k} > 0:",
              f"    if t_tid < t_s{k}:"]
    for e in accs:
        sh = f"acc_sh_{var_name(e.outs[0])}"
        both = combine_of(e).format(f"{sh}[t_tid]", f"{sh}[t_tid + t_s{k}]")
        lines.append(f"        {sh}[t_tid] = {both}")
    lines += ["    cuda.syncthreads()", f"    t_s{k} //= 2"]
    lines += [f"acc_{var_name(e.outs[0])} = acc_sh_{var_name(e.outs[0])}[0]" for e in accs]
    lines.append("cuda.syncthreads()")   # before the next block element reuses the arrays
    return lines
