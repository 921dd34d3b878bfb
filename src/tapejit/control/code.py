"""The numba code of the control-flow ops (primitives.py's records hold it as `cpu`): real
loops and branches in the caller, each sub-tape a function of the same module
(`Kit.function`; 0-d values pass as scalars).

A scan is `for k in range(n): carry = body(carry, xs[k], consts)` (a saving scan also stores
each carry before its step); a while loop is a `while`;
a cond an `if`/`elif` chain; a checkpoint a call. A loop_grad runs the forward steps again,
keeping carries as its policy says (see `checkpointing.reversed_carries`, the same schedule),
then steps the reverse body backwards. Trip counts that are literals are read from the size
table, so the source (and the compiled program) is the same for every number of steps.
Outputs arrive as names: `t_<name>` for a 0-d output (a scalar local), else an array.
"""
from __future__ import annotations

from ..avals import Aval
from ..codegen.calls import Kit
from ..codegen.writer import Sizes, dtype_code, scalar
from ..ir import Eqn, Lit
from .operands import branches, split


def _call(fn: str, args: list[str]) -> str:
    return f"{fn}({''.join(a + ', ' for a in args)}S)"


def _count(eqn: Eqn, ins: list[str], sizes: Sizes) -> str:
    """The trip count: a literal goes through the size table (the source stays the same)."""
    n = eqn.ins[0]
    return sizes(int(n.value)) if isinstance(n, Lit) else ins[0]


def _shape(lead: str, aval: Aval, sizes: Sizes) -> str:
    return "(" + ", ".join([lead] + [sizes(d) for d in aval.shape]) + ",)"


def _unpack(w: Kit, result: str, targets: list[str], start: int = 0) -> None:
    for k, target in enumerate(targets):
        w.line(f"{target} = {result}[{start + k}]")


def _base(outs: list[str]) -> str:
    first = outs[0] if outs else "ctl"
    return first[2:] if first.startswith("t_") else first


def scan(w: Kit, eqn: Eqn, ins: list[str], outs: list[str]) -> None:
    kw, sizes = eqn.kw, w.sizes
    body = w.function(kw["body"])
    base, n_carry = _base(outs), kw["n_carry"]
    carry, xs, consts = split(ins[1:], n_carry, kw["n_xs"])
    c = [f"{base}_c{j}" for j in range(n_carry)]
    n = f"{base}_n"
    w.line(f"{n} = {_count(eqn, ins, sizes)}")
    for name, init in zip(c, carry):
        w.line(f"{name} = {init}")
    ys = outs[n_carry:]           # then, with `save`, the stacked carries
    for var in eqn.outs[n_carry:]:
        w.allocate(var)       # the workspace's array where it can be: no allocation per call
    n_ys = len(kw["body"].outvars) - n_carry
    k, kk = f"{base}_k", f"{base}_kk"
    w.line(f"for {k} in range({n}):")
    w.indent()
    w.line(f"{kk} = {n} - 1 - {k}" if kw["reverse"] else f"{kk} = {k}")
    for stack, name, var in zip(ys[n_ys:], c, eqn.outs[n_carry + n_ys:]):
        w.store(stack, kk, name, sizes.of(var)[1:])
    w.line(f"{base}_r = {_call(body, c + [f'{x}[{kk}]' for x in xs] + consts)}")
    _unpack(w, f"{base}_r", c)
    for j, (y, var) in enumerate(zip(ys[:n_ys], eqn.outs[n_carry:])):
        w.line(f"{y}_y = {base}_r[{n_carry + j}]")
        w.store(y, kk, f"{y}_y", sizes.of(var)[1:])
    w.dedent()
    for out, name in zip(outs, c):
        w.line(f"{out} = {name}")


def while_(w: Kit, eqn: Eqn, ins: list[str], outs: list[str]) -> None:
    kw = eqn.kw
    test = w.function(kw["cond"])
    body = w.function(kw["body"])
    base, n_carry = _base(outs), len(kw["body"].outvars)
    carry, cond_consts, body_consts = split(ins, n_carry, kw["n_cond"])
    c = [f"{base}_c{j}" for j in range(n_carry)]
    for name, init in zip(c, carry):
        w.line(f"{name} = {init}")
    trips = f"{base}_trips"
    w.line(f"{trips} = 0")
    failed = w.index_failed()       # checks in the body or before the loop: stop on a failure
    w.line(f"while {'' if failed is None else f'not {failed} and '}"
           f"{_call(test, c + cond_consts)}[0]:")
    w.indent()
    w.line(f"{base}_r = {_call(body, c + body_consts)}")
    _unpack(w, f"{base}_r", c)
    w.line(f"{trips} += 1")
    w.dedent()
    for out, name in zip(outs, c + [trips]):
        w.line(f"{out} = {name}")


def cond(w: Kit, eqn: Eqn, ins: list[str], outs: list[str]) -> None:
    chosen = branches(eqn.kw)
    for k, branch in enumerate(chosen):
        fn = w.function(branch)
        if len(chosen) == 1:
            test = None
        elif k == 0:
            test = f"if {ins[0]} <= 0:"
        elif k < len(chosen) - 1:
            test = f"elif {ins[0]} == {k}:"
        else:
            test = "else:"
        if test is not None:
            w.line(test)
            w.indent()
        w.line(f"{_base(outs)}_r = {_call(fn, ins[1:])}")
        _unpack(w, f"{_base(outs)}_r", outs)
        if test is not None:
            w.dedent()


def checkpoint(w: Kit, eqn: Eqn, ins: list[str], outs: list[str]) -> None:
    fn = w.function(eqn.kw["body"])
    w.line(f"{_base(outs)}_r = {_call(fn, ins)}")
    _unpack(w, f"{_base(outs)}_r", outs)


_SNAPSHOTS = '''def tj_snapshots(n):
    s, m = 1, 2
    while m < n:
        s, m = s + 1, m * 2
    return s + 1
'''
_SPLIT = '''def tj_split(steps, snaps):
    r, comb = 0, 1
    while comb < steps:
        r += 1
        comb = comb * (snaps + r) // r
    prev = comb * r // (snaps + r) if r > 0 else 1
    return min(max(1, prev), steps - 1)
'''


class _Grad:
    """Names and statement templates of one loop_grad eqn."""

    def __init__(self, w: Kit, eqn: Eqn, ins: list[str], outs: list[str]) -> None:
        kw = eqn.kw
        self.w, self.sizes, self.kw = w, w.sizes, kw
        self.fwd = w.function(kw["fwd"])
        self.rev = w.function(kw["rev"])
        self.base = b = _base(outs)
        self.n = f"{b}_n"
        n_carry, n_xs = kw["n_carry"], kw["n_xs"]
        self.carry, self.xs, self.consts, rest = split(ins[1:], n_carry, n_xs, kw["n_consts"])
        self.carry_avals = [v.aval for v in kw["fwd"].invars[:n_carry]]
        float_carry = [j for j, a in enumerate(self.carry_avals) if a.is_float]
        n_fy = sum(o.aval.is_float for o in kw["fwd"].outvars[n_carry:])
        self.ct_in, self.ct_ys, self.rev_consts = split(rest, len(float_carry), n_fy)
        self.c = [f"{b}_c{j}" for j in range(n_carry)]
        self.ct = [f"{b}_ct{j}" for j in range(len(float_carry))]
        float_xs = [j for j, v in enumerate(eqn.ins[1 + n_carry:1 + n_carry + n_xs])
                    if v.aval.is_float]
        self.ct_xs = outs[len(float_carry):len(float_carry) + len(float_xs)]
        self.ct_x_avals = [eqn.outs[len(float_carry) + j].aval for j in range(len(float_xs))]
        self.acc_avals = [o.aval for o in eqn.outs[len(float_carry) + len(float_xs):]]
        self.acc = [f"{b}_acc{j}" for j in range(len(self.acc_avals))]
        self.outs = outs

    def order(self, k: str) -> str:
        kk = f"{self.base}_kk"
        self.w.line(f"{kk} = {self.n} - 1 - {k}" if self.kw["reverse"] else f"{kk} = {k}")
        return kk

    def advance(self, k: str) -> None:
        kk = self.order(k)
        result = f"{self.base}_r"
        xs = [f"{x}[{kk}]" for x in self.xs]
        self.w.line(f"{result} = {_call(self.fwd, self.c + xs + self.consts)}")
        _unpack(self.w, result, self.c)

    def back(self, k: str) -> None:
        kk = self.order(k)
        result = f"{self.base}_g"
        args = (self.c + [f"{x}[{kk}]" for x in self.xs] + self.consts + self.ct
                + [f"{y}[{kk}]" for y in self.ct_ys] + self.acc + self.rev_consts)
        self.w.line(f"{result} = {_call(self.rev, args)}")
        _unpack(self.w, result, self.acc + self.ct)
        for j, (buf, aval) in enumerate(zip(self.ct_xs, self.ct_x_avals)):
            self.w.line(f"{buf}_x = {result}[{len(self.acc) + len(self.ct) + j}]")
            self.w.store(buf, kk, f"{buf}_x", aval.shape[1:])

    def stores(self, name: str, count: str) -> list[str]:
        """One buffer per carry leaf, `count` carries long."""
        bufs = [f"{self.base}_{name}{j}" for j in range(len(self.c))]
        for buf, aval in zip(bufs, self.carry_avals):
            self.w.line(f"{buf} = np.empty({_shape(count, aval, self.sizes)}, "
                        f"{dtype_code(aval.dtype)})")
        return bufs

    def save(self, bufs: list[str], slot: str) -> None:
        for buf, c, aval in zip(bufs, self.c, self.carry_avals):
            self.w.store(buf, slot, c, aval.shape)

    def load(self, bufs: list[str], slot: str) -> None:
        for buf, c in zip(bufs, self.c):
            self.w.line(f"{c} = {buf}[{slot}]")


def loop_grad(w: Kit, eqn: Eqn, ins: list[str], outs: list[str]) -> None:
    g = _Grad(w, eqn, ins, outs)
    sizes = w.sizes
    w.line(f"{g.n} = {_count(eqn, ins, sizes)}")
    for buf, aval in zip(g.ct_xs, g.ct_x_avals):
        w.line(f"{buf} = np.zeros({sizes.shape(aval.shape)}, {dtype_code(aval.dtype)})")
    for acc, aval in zip(g.acc, g.acc_avals):
        w.line(f"{acc} = " + (scalar(0, aval.dtype) if not aval.shape else
                              f"np.zeros({sizes.shape(aval.shape)}, {dtype_code(aval.dtype)})"))
    for name, init in zip(g.c + g.ct, g.carry + g.ct_in):
        w.line(f"{name} = {init}")
    if g.kw["checkpoints"] == "binomial":
        _binomial(g)
    else:
        _segments(g)
    for out, name in zip(outs, g.ct + g.ct_xs + g.acc):
        if out != name:
            w.line(f"{out} = {name}")


def _segments(g: _Grad) -> None:
    """Snapshots every `seg` steps (seg = 1: every carry), then per segment from the last:
    recompute its carries into a buffer and step backwards through them."""
    w, b, n = g.w, g.base, g.n
    k = g.kw["checkpoints"]
    seg, start, end, i = f"{b}_seg", f"{b}_start", f"{b}_end", f"{b}_i"
    w.line(f"{seg} = 1" if k is None else f"{seg} = max(1, ({n} + {k - 1}) // {k})")
    snaps = g.stores("snap", f"({n} + {seg} - 1) // {seg}")
    buf = g.stores("buf", seg) if k is not None else snaps
    w.line(f"for {i} in range({n}):")
    w.indent()
    if k is None:
        g.save(snaps, i)
    else:
        w.line(f"if {i} % {seg} == 0:")
        w.indent()
        g.save(snaps, f"{i} // {seg}")
        w.dedent()
    g.advance(i)
    w.dedent()
    if k is None:
        w.line(f"for {i} in range({n} - 1, -1, -1):")
        w.indent()
        g.load(snaps, i)
        g.back(i)
        w.dedent()
        return
    w.line(f"{start} = (({n} - 1) // {seg}) * {seg}")
    w.line(f"while {start} >= 0:")
    w.indent()
    w.line(f"{end} = min({start} + {seg}, {n})")
    g.load(snaps, f"{start} // {seg}")
    w.line(f"for {i} in range({start}, {end}):")
    w.indent()
    g.save(buf, f"{i} - {start}")
    w.line(f"if {i} < {end} - 1:")
    w.indent()
    g.advance(i)
    w.dedent()
    w.dedent()
    w.line(f"for {i} in range({end} - 1, {start} - 1, -1):")
    w.indent()
    g.load(buf, f"{i} - {start}")
    g.back(i)
    w.dedent()
    w.line(f"{start} -= {seg}")
    w.dedent()


def _binomial(g: _Grad) -> None:
    """Revolve's schedule with a stack of tasks (a, b, slot, free): reverse steps a..b-1
    from the carry in snapshot `slot`, with `free` snapshots to spare (primitives.py)."""
    w, b, n = g.w, g.base, g.n
    snapshots = w.helper("tj_snapshots", _SNAPSHOTS)
    split_at = w.helper("tj_split", _SPLIT)
    s, t, top = f"{b}_s", f"{b}_tasks", f"{b}_top"
    lo, hi, slot, free, m, i, j = (f"{b}_{x}" for x in ("a", "b", "slot", "free", "m", "i", "j"))
    w.line(f"{s} = {snapshots}({n})")
    snaps = g.stores("snap", f"{s} + 1")
    g.save(snaps, "0")
    w.line(f"{t} = np.empty(({s} + 3, 4), np.int64)")
    w.line(f"{t}[0, 0], {t}[0, 1], {t}[0, 2], {t}[0, 3] = 0, {n}, 0, {s}")
    w.line(f"{top} = 1 if {n} > 0 else 0")
    w.line(f"while {top} > 0:")
    w.indent()
    w.line(f"{top} -= 1")
    w.line(f"{lo}, {hi}, {slot}, {free} = {t}[{top}, 0], {t}[{top}, 1], {t}[{top}, 2], "
           f"{t}[{top}, 3]")
    w.line(f"if {hi} - {lo} == 1:")
    w.indent()
    g.load(snaps, slot)
    g.back(lo)
    w.dedent()
    w.line(f"elif {free} == 0:")          # no snapshot left: recompute for each step
    w.indent()
    w.line(f"for {j} in range({hi} - 1, {lo} - 1, -1):")
    w.indent()
    g.load(snaps, slot)
    w.line(f"for {i} in range({lo}, {j}):")
    w.indent()
    g.advance(i)
    w.dedent()
    g.back(j)
    w.dedent()
    w.dedent()
    w.line("else:")
    w.indent()
    w.line(f"{m} = {lo} + {split_at}({hi} - {lo}, {free})")
    g.load(snaps, slot)
    w.line(f"for {i} in range({lo}, {m}):")
    w.indent()
    g.advance(i)
    w.dedent()
    g.save(snaps, f"{slot} + 1")
    w.line(f"{t}[{top}, 0], {t}[{top}, 1], {t}[{top}, 2], {t}[{top}, 3] = "
           f"{lo}, {m}, {slot}, {free}")
    w.line(f"{t}[{top} + 1, 0], {t}[{top} + 1, 1], {t}[{top} + 1, 2], {t}[{top} + 1, 3] = "
           f"{m}, {hi}, {slot} + 1, {free} - 1")
    w.line(f"{top} += 2")
    w.dedent()
    w.dedent()

