"""The statement templates of program_generator.py's random programs.

`Builder.statement()` picks a template by weight; a template picks its operands among the
values made so far and returns a `Made` (text, axis symbols, magnitude bound, values read), or
None where no operand fits (another template is tried). Operands are combined only where their
axis symbols make the statement valid at every size the program may be given.
`Builder.guarded()` appends a statement a guard decides (a Python `if`, `int()`, or a Python
int parameter as an index or slice bound) on the newest value.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import math
from typing import Callable

import numpy as np

from .program_generator import (MAGNITUDE_LIMIT, ONE, Arg, Line, RandomProgram, Sym, bases,
                                largest, size_of)

MAX_RANK = 4


class Unfit(Exception):
    """A template's statement would not be valid at every size (another one is tried)."""


@dataclasses.dataclass
class Value:
    name: str
    dims: tuple[Sym, ...]
    mag: float          # a bound of |value|


@dataclasses.dataclass
class Made:
    text: str
    dims: tuple[Sym, ...]
    mag: float
    reads: tuple[str, ...]


def broadcast(a: tuple[Sym, ...], b: tuple[Sym, ...]) -> tuple[Sym, ...] | None:
    """numpy's broadcast of two symbol tuples, or None where it depends on the sizes."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else ONE
        y = b[-i] if i <= len(b) else ONE
        if x != y and ONE not in (x, y):
            return None
        out.append(y if x == ONE else x)
    return tuple(reversed(out))


def axis_index(rank: int, axis: int, item: str) -> str:
    """`[:, :, item]`-style text selecting `item` on `axis` (0 <= axis < rank)."""
    if axis == rank - 1 and rank > 1:
        return f"[..., {item}]"
    return "[" + ", ".join([":"] * axis + [item]) + "]"


UNARY: list[tuple[str, Callable[[float], float | None]]] = [
    ("np.sin({0})", lambda m: 1.0), ("np.cos({0})", lambda m: 1.0),
    ("np.tanh({0})", lambda m: 1.0),
    ("np.exp({0})", lambda m: math.exp(m) if m <= 3 else None),
    ("np.log({0} * {0} + 1.0)", lambda m: math.log(m * m + 1)),
    ("np.sqrt({0} * {0} + 0.5)", lambda m: math.sqrt(m * m + 0.5)),
    ("{0} ** 2", lambda m: m * m), ("-{0}", lambda m: m), ("{0} * 0.5 + 1.0", lambda m: m)]
BINARY: list[tuple[str, Callable[[float, float], float]]] = [
    ("{0} + {1}", lambda a, b: a + b), ("{0} - {1}", lambda a, b: a + b),
    ("{0} * {1}", lambda a, b: a * b), ("{0} / ({1} * {1} + 1.0)", lambda a, b: a),
    ("np.maximum({0}, {1})", max), ("np.minimum({0}, {1})", max),
    ("np.where({0} > {1}, {0}, 0.5 * {1})", max),
    ("tj.where({0} < 0.2, np.sin({1}), {0})", lambda a, b: max(a, 1.0))]
REDUCTIONS = ("sum", "mean", "max", "min")


class Builder:
    """Grows one random program, statement by statement."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.args: list[Arg] = []
        self.values: list[Value] = []
        self.lines: list[Line] = []
        self.minimum: dict[Sym, int] = {}
        self.n_symbols = 0

    # -- parameters and bookkeeping ---------------------------------------------------------
    def new_symbol(self) -> Sym:
        self.n_symbols += 1
        return ("n", self.n_symbols - 1)

    def float_arg(self) -> None:
        """A float parameter of rank 0-3: each axis a new symbol, an old one, or length 1."""
        dims = []
        for _ in range(int(self.rng.choice(4, p=[0.1, 0.35, 0.4, 0.15]))):
            old = [b for v in self.values for d in v.dims for b in bases(d)]
            roll = self.rng.random()
            dims.append(ONE if roll < 0.15 else self.pick(old) if old and roll < 0.5
                        else self.new_symbol())
        name = f"x{sum(a.bound is None for a in self.args)}"
        self.args.append(Arg(name, tuple(dims)))
        self.values.append(Value(name, tuple(dims), 1.5))

    def index_arg(self, bound: Sym) -> str:
        """A new int64 index parameter into an axis `bound` (which must not be empty)."""
        self.require(bound)
        rank = 2 if self.rng.random() < 0.2 else 1
        name = f"i{sum(a.bound is not None for a in self.args)}"
        self.args.append(Arg(name, tuple(self.new_symbol() for _ in range(rank)), bound))
        return name

    def require(self, sym: Sym, least: int = 1) -> None:
        """The axis `sym` must have at least `least` (1 or 2) elements at every size drawn."""
        tag = sym[0]
        if tag in ("1", "const") and size_of(sym, {}) < least:
            raise Unfit(f"an axis of length {size_of(sym, {})} cannot have {least} elements")
        if tag == "n":
            self.minimum[sym] = max(self.minimum.get(sym, 0), least)
        elif tag == "drop":
            self.require(sym[1], least + 1)
        elif tag in ("prod", "half", "first"):
            for s in sym[1:]:
                self.require(s, least)
        elif tag == "cat":
            self.require(sym[1], least)

    def pick(self, items: list):
        return items[int(self.rng.integers(len(items)))]

    def operand(self, fits: Callable[[Value], bool] = lambda v: True) -> Value | None:
        """A value that `fits`: often the newest, so statements chain, or one no statement
        read yet, so the arguments meet."""
        fitting = [v for v in self.values if fits(v)]
        unread = [v for v in fitting if not any(v.name in line.reads for line in self.lines)]
        if not fitting:
            return None
        roll = self.rng.random()
        if roll < 0.4:
            return fitting[-1]
        return self.pick(unread) if unread and roll < 0.8 else self.pick(fitting)

    def statement(self) -> None:
        """Append one statement (a unary op where no other template fits)."""
        names, weights = zip(*TEMPLATES)
        p = np.array(weights, float)
        for _ in range(10):
            try:
                made = getattr(self, names[int(self.rng.choice(len(names), p=p / p.sum()))])()
            except Unfit:
                continue
            if made is not None and made.mag <= MAGNITUDE_LIMIT:
                break
        else:
            made = self.unary()
        self.add(made)

    def add(self, made: Made) -> None:
        name = f"t{len(self.lines)}"
        self.lines.append(Line(name, made.text, made.reads))
        self.values.append(Value(name, made.dims, made.mag))

    def join(self) -> None:
        """Combine the newest value with each float parameter no statement reads: where their
        symbols broadcast, elementwise; else every axis against every axis; else with its
        sum."""
        for arg in [v for v in self.values if v.name.startswith("x")]:
            if any(arg.name in line.reads for line in self.lines):
                continue
            last = self.values[-1]
            if broadcast(last.dims, arg.dims) is not None:
                self.add(Made(f"{last.name} * {arg.name}", broadcast(last.dims, arg.dims),
                              last.mag * arg.mag, (last.name, arg.name)))
            elif len(last.dims) + len(arg.dims) <= MAX_RANK:
                left = f"{last.name}[..., {', '.join(['None'] * len(arg.dims))}]"
                right = f"{arg.name}[{', '.join(['None'] * len(last.dims))}]"
                self.add(Made(f"{left} - {right}", last.dims + arg.dims, last.mag + arg.mag,
                              (last.name, arg.name)))
            else:
                self.add(Made(f"{last.name} + np.sum({arg.name})", last.dims,
                              last.mag + arg.mag * largest(arg.dims), (last.name, arg.name)))

    def program(self, scalar: bool) -> RandomProgram:
        whole = RandomProgram(tuple(self.args), tuple(self.lines), self.lines[-1].name, scalar,
                              tuple(self.minimum.items()))
        return whole.upto(whole.output)

    # -- elementwise ------------------------------------------------------------------------
    def unary(self) -> Made:
        v = self.operand()
        options = [(t, f(v.mag)) for t, f in UNARY if f(v.mag) is not None]
        text, mag = options[int(self.rng.integers(len(options)))]
        if mag > MAGNITUDE_LIMIT:
            text, mag = "np.tanh({0})", 1.0
        return Made(text.format(v.name), v.dims, mag, (v.name,))

    def binary(self) -> Made | None:
        """An elementwise op of two values whose symbols broadcast (or of a value and 0.7)."""
        a = self.operand()
        partners = [v for v in self.values if broadcast(a.dims, v.dims) is not None]
        b = self.pick(partners) if partners and self.rng.random() < 0.85 else None
        text, mag = BINARY[int(self.rng.integers(len(BINARY)))]
        if b is None:
            return Made(text.format(a.name, "0.7"), a.dims, mag(a.mag, 0.7), (a.name,))
        return Made(text.format(a.name, b.name), broadcast(a.dims, b.dims), mag(a.mag, b.mag),
                    (a.name, b.name))

    def outer(self) -> Made | None:
        """`a[..., None] op b[None, ...]`: every axis of a against every axis of b."""
        a = self.operand(lambda v: 0 < len(v.dims) < MAX_RANK)
        b = a and self.operand(lambda v: 0 < len(v.dims) <= MAX_RANK - len(a.dims))
        if b is None:
            return None
        left = f"{a.name}[..., {', '.join(['None'] * len(b.dims))}]"
        right = f"{b.name}[{', '.join(['None'] * len(a.dims))}]"
        op = self.pick(["+", "-", "*"])
        mag = a.mag * b.mag if op == "*" else a.mag + b.mag
        return Made(f"{left} {op} {right}", a.dims + b.dims, mag, (a.name, b.name))

    def pairwise(self) -> Made | None:
        """`p[None] - p[:, None]`: differences of every pair of rows."""
        p = self.operand(lambda v: 0 < len(v.dims) < MAX_RANK)
        if p is None:
            return None
        return Made(f"{p.name}[None] - {p.name}[:, None]", p.dims[:1] + p.dims, 2 * p.mag,
                    (p.name,))

    # -- reductions and layout --------------------------------------------------------------
    def reduce(self) -> Made | None:
        v = self.operand(lambda v: len(v.dims) > 0)
        if v is None:
            return None
        kind = self.pick(list(REDUCTIONS))
        rank = len(v.dims)
        axes = [None, *range(rank), -1] + ([(0, rank - 1)] if rank > 1 else [])
        axis = self.pick(axes)
        keep = bool(self.rng.random() < 0.4)
        chosen = set(range(rank)) if axis is None else {a % rank for a in np.atleast_1d(axis)}
        gone = tuple(v.dims[i] for i in sorted(chosen))
        if kind != "sum":
            for sym in gone:
                self.require(sym)
        dims = tuple(ONE if i in chosen else d for i, d in enumerate(v.dims) if keep
                     or i not in chosen)
        keep_text = ", keepdims=True" if keep else ""
        if self.rng.random() < 0.5:
            text = f"np.{kind}({v.name}, axis={axis}{keep_text})"
        else:
            text = f"{v.name}.{kind}(axis={axis}{keep_text})"
        mag = v.mag * largest(gone) if kind == "sum" else v.mag
        return Made(text, dims, mag, (v.name,))

    def order(self) -> Made | None:
        """np.sort along an axis (also a negative one), or np.median over one."""
        v = self.operand(lambda v: len(v.dims) > 0)
        if v is None:
            return None
        rank = len(v.dims)
        axis = int(self.rng.integers(rank))
        if self.rng.random() < 0.5:
            text = self.pick([f"np.sort({v.name}, axis={axis})",
                              f"np.sort({v.name}, axis={axis - rank})"])
            return Made(text, v.dims, v.mag, (v.name,))
        self.require(v.dims[axis])
        return Made(f"np.median({v.name}, axis={axis})", v.dims[:axis] + v.dims[axis + 1:],
                    v.mag, (v.name,))

    def transpose(self) -> Made | None:
        v = self.operand(lambda v: len(v.dims) > 1)
        if v is None:
            return None
        rank = len(v.dims)
        perm = [int(i) for i in self.rng.permutation(rank)]
        choices = [(f"{v.name}.T", list(range(rank))[::-1]),
                   (f"np.transpose({v.name}, {tuple(perm)})", perm),
                   (f"np.swapaxes({v.name}, 0, -1)", [rank - 1, *range(1, rank - 1), 0]),
                   (f"np.moveaxis({v.name}, 0, -1)", [*range(1, rank), 0])]
        text, order = self.pick(choices)
        return Made(text, tuple(v.dims[i] for i in order), v.mag, (v.name,))

    def expand(self) -> Made | None:
        """A new length-1 axis, or one removed."""
        v = self.operand()
        ones = [i for i, d in enumerate(v.dims) if d == ONE]
        if ones and self.rng.random() < 0.5:
            i = self.pick(ones)
            text = self.pick([f"np.squeeze({v.name}, axis={i})",
                              f"{v.name}{axis_index(len(v.dims), i, '0')}"])
            return Made(text, v.dims[:i] + v.dims[i + 1:], v.mag, (v.name,))
        if len(v.dims) >= MAX_RANK:
            return None
        i = int(self.rng.integers(len(v.dims) + 1))
        text = self.pick([f"np.expand_dims({v.name}, {i})",
                          f"{v.name}[{', '.join([':'] * i + ['None'])}]"])
        return Made(text, v.dims[:i] + (ONE,) + v.dims[i:], v.mag, (v.name,))

    def reshape(self) -> Made | None:
        """Flatten, or merge the first two axes."""
        v = self.operand(lambda v: len(v.dims) > 1)
        if v is None:
            return None
        merged = ("prod", v.dims[0], v.dims[1])
        if self.rng.random() < 0.4:
            flat = merged if len(v.dims) == 2 else ("prod", merged, v.dims[2])
            flat = flat if len(v.dims) <= 3 else ("prod", flat, v.dims[3])
            text = self.pick([f"{v.name}.reshape(-1)", f"{v.name}.ravel()",
                              f"np.reshape({v.name}, ({v.name}.size,))"])
            return Made(text, (flat,), v.mag, (v.name,))
        rest = "".join(f", {v.name}.shape[{i}]" for i in range(2, len(v.dims)))
        text = f"{v.name}.reshape({v.name}.shape[0] * {v.name}.shape[1]{rest})"
        return Made(text, (merged,) + v.dims[2:], v.mag, (v.name,))

    def slice(self) -> Made | None:
        v = self.operand(lambda v: len(v.dims) > 0)
        if v is None:
            return None
        i = int(self.rng.integers(len(v.dims)))
        item, sym = self.pick([("1:", ("drop", v.dims[i])), (":-1", ("drop", v.dims[i])),
                               ("::2", ("half", v.dims[i])), ("::-1", v.dims[i]),
                               (":1", ("first", v.dims[i]))])
        if v.dims[i] == ONE and sym[0] == "first":
            sym = ONE
        dims = v.dims[:i] + (sym,) + v.dims[i + 1:]
        return Made(f"{v.name}{axis_index(len(v.dims), i, item)}", dims, v.mag, (v.name,))

    def take(self, by_argument: bool = False) -> Made | None:
        """Integer indexing: by an index parameter, a constant array, or a number."""
        v = self.operand(lambda v: len(v.dims) > 0)
        if v is None:
            return None
        i = 0 if len(v.dims) == 1 or self.rng.random() < 0.6 else 1
        roll = self.rng.random() * (0.5 if by_argument else 1.0)
        if roll < 0.5:
            index = self.index_arg(v.dims[i])
            new, reads = self.args[-1].dims, (v.name, index)
        else:
            self.require(v.dims[i])
            index, new = ("np.array([0, -1, 0])", (("const", 3),)) if roll < 0.75 else ("-1", ())
            reads = (v.name,)
        text = f"{v.name}{axis_index(len(v.dims), i, index)}"
        if i == len(v.dims) - 1 and len(v.dims) > 1 and new and roll < 0.5:
            text = f"np.take({v.name}, {index}, axis={i})"
        dims = v.dims[:i] + new + v.dims[i + 1:]
        return Made(text, dims, v.mag, reads) if len(dims) <= MAX_RANK else None

    def gather(self) -> Made | None:
        """Indexing by an index parameter (selfcheck also calls it with one out of range)."""
        return self.take(by_argument=True)

    def concatenate(self) -> Made | None:
        v = self.operand(lambda v: 0 < len(v.dims) < MAX_RANK)
        if v is None:
            return None
        w = self.operand(lambda u: u.dims == v.dims)
        other, reads = (w.name, (v.name, w.name)) if w.name != v.name else (
            f"np.sin({v.name})", (v.name,))
        mag = max(v.mag, w.mag, 1.0)
        i = int(self.rng.integers(len(v.dims)))
        if self.rng.random() < 0.3:
            dims = v.dims[:i] + (("const", 2),) + v.dims[i:]
            return Made(f"np.stack([{v.name}, {other}], axis={i})", dims, mag, reads)
        dims = v.dims[:i] + (("cat", v.dims[i], v.dims[i]),) + v.dims[i + 1:]
        return Made(f"np.concatenate([{v.name}, {other}], axis={i})", dims, mag, reads)

    # -- products -------------------------------------------------------------------------
    def product(self) -> Made | None:
        """matmul, @, dot, einsum, outer, inner on operands whose symbols contract."""
        v = self.operand(lambda v: 0 < len(v.dims) <= 3)
        if v is None:
            return None
        made = {1: self.vector_product, 2: self.matrix_product, 3: self.batch_product}
        return made[len(v.dims)](v)

    def _contract(self, text: str, dims: tuple, a: Value, b: Value, k: Sym) -> Made:
        return Made(text, dims, a.mag * b.mag * largest((k,)), (a.name, b.name))

    def vector_product(self, v: Value) -> Made:
        (n,) = v.dims
        w = self.operand(lambda u: len(u.dims) in (1, 2))
        if w.dims[0] == n and len(w.dims) == 1 and self.rng.random() < 0.6:
            text = self.pick([f"np.dot({v.name}, {w.name})", f"{v.name} @ {w.name}",
                              f"np.einsum('i,i->', {v.name}, {w.name})",
                              f"np.inner({v.name}, {w.name})"])
            return self._contract(text, (), v, w, n)
        if w.dims[0] == n:
            return self._contract(f"{v.name} @ {w.name}", w.dims[1:], v, w, n)
        u = self.operand(lambda u: len(u.dims) == 1)
        text = self.pick([f"np.outer({v.name}, {u.name})",
                          f"np.einsum('i,j->ij', {v.name}, {u.name})"])
        return Made(text, (n, u.dims[0]), v.mag * u.mag, (v.name, u.name))

    def matrix_product(self, v: Value) -> Made:
        n, k = v.dims
        w = self.operand(lambda u: len(u.dims) in (1, 2) and u.dims[0] == k)
        if w is not None and self.rng.random() < 0.7:
            text = self.pick([f"{v.name} @ {w.name}", f"np.dot({v.name}, {w.name})",
                              f"np.matmul({v.name}, {w.name})"]
                             + ([f"np.einsum('ij,jk->ik', {v.name}, {w.name})"]
                                if len(w.dims) == 2 else []))
            return self._contract(text, (n,) + w.dims[1:], v, w, k)
        if n == k and self.rng.random() < 0.5:
            text = self.pick([f"np.einsum('ii->i', {v.name})",
                              f"np.einsum('ij,ji->i', {v.name}, {v.name})"])
            return self._contract(text, (n,), v, v, k)
        choices = [(f"{v.name} @ {v.name}.T", (n, n), k), (f"{v.name}.T @ {v.name}", (k, k), n),
                   (f"np.einsum('ij,kj->ik', {v.name}, {v.name})", (n, n), k),
                   (f"np.einsum('ij->j', {v.name})", (k,), n)]
        text, dims, contracted = self.pick(choices)
        return self._contract(text, dims, v, v, contracted)

    def batch_product(self, v: Value) -> Made:
        z, n, k = v.dims
        text, dims = self.pick([(f"{v.name} @ np.swapaxes({v.name}, -1, -2)", (z, n, n)),
                                (f"np.einsum('zij,zkj->zik', {v.name}, {v.name})", (z, n, n)),
                                (f"np.einsum('zij,zik->zjk', {v.name}, {v.name})", (z, k, k))])
        return self._contract(text, dims, v, v, k if dims[1] == n else n)

    # -- control flow -----------------------------------------------------------------------
    def loop(self) -> Made | None:
        """tj.fori_loop, tj.scan or tj.cond around a few elementwise ops."""
        c = self.operand()
        w = self.operand(lambda u: broadcast(u.dims, c.dims) == c.dims)
        kind = self.pick(["fori", "scan", "cond"] if c.dims else ["fori", "cond"])
        if kind == "fori" and c.dims and self.rng.random() < 0.5:
            # two carries that trade arrays: the first takes the second's, the second a new one
            text = (f"tj.fori_loop(0, 3, lambda i, c: (c[1], np.tanh(c[0]) * 0.5 + {w.name}), "
                    f"({c.name}, {c.name} * 0.5 + {w.name}))[{self.pick([0, 1])}]")
            return Made(text, c.dims, c.mag + w.mag + 0.5, (c.name, w.name))
        if kind == "fori":
            text = f"tj.fori_loop(0, 2, lambda i, c: np.tanh(c) * 0.5 + {w.name}, {c.name})"
            return Made(text, c.dims, 0.5 + w.mag, (c.name, w.name))
        if kind == "cond":   # not `> 0`: a sum such as that of p[None] - p[:, None] is 0 up to
            # rounding, and summing in another order than numpy's would take the other branch
            text = (f"tj.cond(np.sum({w.name}) > 0.25, lambda a: np.sin(a) * {w.name}, "
                    f"lambda a: a * 0.5, {c.name})")
            return Made(text, c.dims, max(w.mag, c.mag), (c.name, w.name))
        first = self.pick([0, 1])
        text = (f"tj.scan(lambda c, x: (c * 0.5 + x, np.sin(c) * x), "
                f"np.sum({c.name}, axis=0) * 0.0, {c.name})[{first}]")
        return Made(text, c.dims[1:] if first == 0 else c.dims, 2 * c.mag, (c.name,))

    # -- linear algebra, order statistics, special functions -------------------------------
    def linalg(self) -> Made | None:
        """An np.linalg function of `v @ v.T + I`: symmetric, eigenvalues >= 1, so well
        conditioned at every size (and no repeated-eigenvalue gradients: no eigh here)."""
        v = self.operand(lambda v: len(v.dims) == 2)
        if v is None:
            return None
        n, k = v.dims
        self.require(n)
        spd = f"({v.name} @ {v.name}.T + np.eye({v.name}.shape[0]))"
        entry = 1 + largest((k,)) * v.mag ** 2          # a bound of its entries
        w = self.operand(lambda u: len(u.dims) in (1, 2) and u.dims[0] == n)
        choices = [(f"np.linalg.inv({spd})", (n, n), 1.0, ()),
                   (f"np.linalg.cholesky({spd})", (n, n), math.sqrt(entry), ()),
                   (f"np.linalg.slogdet({spd})[1]", (), largest((n,)) * math.log(
                       largest((n,)) * entry), ())]
        if w is not None:      # |S^-1 w| <= |w| (2-norms)
            choices.append((f"np.linalg.solve({spd}, {w.name})", w.dims,
                            w.mag * math.sqrt(largest(w.dims)), (w.name,)))
        text, dims, mag, more = self.pick(choices)
        return Made(text, dims, mag, (v.name, *more))

    def quantile(self) -> Made | None:
        """np.percentile / np.quantile over one axis, or np.cumsum along one."""
        v = self.operand(lambda v: len(v.dims) > 0)
        if v is None:
            return None
        axis = int(self.rng.integers(len(v.dims)))
        if self.rng.random() < 0.4:
            return Made(f"np.cumsum({v.name}, axis={axis})", v.dims,
                        v.mag * largest(v.dims[axis:axis + 1]), (v.name,))
        self.require(v.dims[axis])
        text = self.pick([f"np.percentile({v.name}, 30.0, axis={axis})",
                          f"np.quantile({v.name}, 0.75, axis={axis})"])
        return Made(text, v.dims[:axis] + v.dims[axis + 1:], v.mag, (v.name,))

    def special(self) -> Made | None:
        """A scipy.special function (`sp` in the program's scope; unfit without scipy)."""
        if importlib.util.find_spec("scipy") is None:
            return None
        v = self.operand()
        text, mag = self.pick([("sp.expit({0})", 1.0), ("sp.erf({0})", 1.0),
                               ("sp.gammaln({0} * {0} + 1.0)",
                                (v.mag ** 2 + 1) * math.log(v.mag ** 2 + 2)),
                               ("sp.xlogy({0} * {0}, {0} * {0} + 1.0)",
                                v.mag ** 2 * math.log(v.mag ** 2 + 1))])
        return Made(text.format(v.name), v.dims, mag, (v.name,))


    # -- Python control flow on values of the call (guarded programs) -------------------------
    def guarded(self, rng: np.random.Generator) -> None:
        """Append one statement on the newest value that a guard decides: a Python `if` or
        `int()` on a traced value, or an index or slice by a Python int parameter. Drawn from
        `rng`, not the builder's own generator, so that the statements before are those of
        the same seed without it."""
        self.rng = rng
        try:
            made = self.branch(rng.random() < 0.3) if rng.random() < 0.5 else self.int_slice()
        except Unfit:
            made = None
        if made is None or made.mag > MAGNITUDE_LIMIT:
            made = self.branch(count=False)
        self.add(made)

    def branch(self, count: bool) -> Made:
        """A Python `if` (or, with `count`, `int()`) on a traced sum against a threshold inside
        the values' range, so that calls with new values take either side (a variant each)."""
        v, u = self.values[-1], self.operand()
        test = f"np.sum({u.name}) > {self.rng.uniform(-1, 1):.2f}"
        if not count:
            return Made(f"np.sin({v.name}) if {test} else {v.name} * 0.5 - 1.0", v.dims,
                        max(1.0, v.mag * 0.5 + 1.0), (v.name, u.name))
        times = f"min(int(np.sum({u.name} > {self.rng.uniform(-1, 1):.2f})), 3)"
        return Made(f"{v.name} * {times}", v.dims, v.mag * 3, (v.name, u.name))

    def int_slice(self) -> Made | None:
        """A Python int parameter that slices or indexes a value (the program specializes on
        it), or that only scales one (a run-time value)."""
        v = self.values[-1]
        if not v.dims:
            return None
        k = f"k{sum(a.python_int for a in self.args)}"
        self.args.append(Arg(k, (), python_int=True))
        rest, roll = v.dims[1:], self.rng.random()
        if roll < 0.4:
            text = f"np.sum({v.name}[{self.pick([f'{k}:', f':{k}', f'{k}::2'])}], axis=0)"
            return Made(text, rest, v.mag * largest(v.dims[:1]), (v.name, k))
        if roll < 0.7:
            self.require(v.dims[0])
            return Made(f"{v.name}[min({k}, {v.name}.shape[0] - 1)]", rest, v.mag, (v.name, k))
        return Made(f"{v.name} * ({k} - 1.5)", v.dims, v.mag * 1.5, (v.name, k))


TEMPLATES = [("unary", 3), ("binary", 4), ("outer", 2), ("pairwise", 1), ("reduce", 3),
             ("order", 1), ("transpose", 1.5), ("expand", 1.5), ("reshape", 1), ("slice", 1.5),
             ("take", 1.5), ("gather", 1), ("concatenate", 1), ("product", 3), ("loop", 1),
             ("linalg", 0.7), ("quantile", 0.7), ("special", 0.7)]
