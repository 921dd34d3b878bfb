"""Random numpy programs for `tapejit selfcheck` (selfcheck.py), built from a seed.

A program is the source text of a function `f(x0, x1, i0, ...)`, one statement a line, whose
axes are *symbols*: an argument's axis is a base symbol, and each statement's axes derive from
its operands' (a product after a reshape, a sum after a concatenate, ...). Operands are combined
only where their symbols make them valid whatever the sizes, and the sizes are drawn afterwards
from a tiny set ({0, 1, 2, 3}), so two different axes often have equal lengths: the coincidence
that compiled code must not mistake for an identity. The same program with new sizes is the
"new batch" check. Templates live in statement_templates.py.
"""
from __future__ import annotations

import dataclasses
import linecache
import math
from typing import Any, Callable

import numpy as np

ONE = ("1",)                 # an axis of length 1, written as such (broadcasts)
SIZES = (0, 1, 2, 3)         # lengths of base symbols ...
NEW_SIZES = (0, 1, 2, 3, 4, 17)  # ... and in the later calls with new lengths (17: more than
SIZE_WEIGHTS = {0: 1, 1: 2, 2: 4, 3: 4, 4: 4, 17: 1}  # codegen's fixed trailing lengths)
MAX_SIZE = max(NEW_SIZES)
MAGNITUDE_LIMIT = 30.0       # no statement's values may exceed this (rough bound)

Sym = tuple


def size_of(sym: Sym, sizes: dict[Sym, int]) -> int:
    """The length of an axis symbol for the base symbols' `sizes`."""
    tag = sym[0]
    if tag == "1":
        return 1
    if tag == "n":
        return sizes[sym]
    if tag == "const":
        return sym[1]
    inner = [size_of(s, sizes) for s in sym[1:]]
    return {"prod": lambda: inner[0] * inner[1], "cat": lambda: inner[0] + inner[1],
            "drop": lambda: max(inner[0] - 1, 0), "half": lambda: (inner[0] + 1) // 2,
            "first": lambda: min(inner[0], 1)}[tag]()


def bases(sym: Sym) -> list[Sym]:
    """The base symbols an axis symbol is made of."""
    if sym[0] == "n":
        return [sym]
    return [b for s in sym[1:] if isinstance(s, tuple) for b in bases(s)]


def largest(dims: tuple[Sym, ...]) -> int:
    """An upper bound of the number of elements of `dims` at any size drawn."""
    return math.prod(size_of(d, {b: MAX_SIZE for b in bases(d)}) for d in dims)


@dataclasses.dataclass(frozen=True)
class Arg:
    """A parameter: float (bound None), an integer index array into an axis `bound`, or a
    Python int in 0..3 (`python_int`: it slices, indexes or scales a value)."""

    name: str
    dims: tuple[Sym, ...]
    bound: Sym | None = None
    python_int: bool = False


@dataclasses.dataclass(frozen=True)
class Line:
    """One statement `name = text`, reading the values `reads`."""

    name: str
    text: str
    reads: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class RandomProgram:
    """A generated function: its parameters, statements, returned value, and the least length
    each base symbol needs (an axis reduced by max must not be empty, ...)."""

    args: tuple[Arg, ...]
    lines: tuple[Line, ...]
    output: str
    scalar: bool                               # returns np.sum(output): a float scalar
    minimum: tuple[tuple[Sym, int], ...]

    @property
    def source(self) -> str:
        body = [f"    {line.name} = {line.text}" for line in self.lines]
        result = f"np.sum({self.output})" if self.scalar else self.output
        params = ", ".join(a.name for a in self.args)
        return "\n".join([f"def f({params}):", *body, f"    return {result}"]) + "\n"

    @property
    def float_positions(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.args)
                     if a.bound is None and not a.python_int)

    def symbols(self) -> list[Sym]:
        """The base symbols of the parameters, in order."""
        seen = []
        for arg in self.args:
            for d in arg.dims + ((arg.bound,) if arg.bound else ()):
                seen += [b for b in bases(d) if b not in seen]
        return seen

    def draw_sizes(self, rng: np.random.Generator, unlike: dict | None = None,
                   choices: tuple[int, ...] = SIZES) -> dict[Sym, int]:
        """Lengths for the base symbols (different from `unlike` where any can differ)."""
        low = dict(self.minimum)
        for _ in range(20):
            sizes = {}
            for sym in self.symbols():
                allowed = [n for n in choices if n >= low.get(sym, 0)]
                weights = np.array([SIZE_WEIGHTS[n] for n in allowed], float)
                sizes[sym] = int(rng.choice(allowed, p=weights / weights.sum()))
            if sizes != unlike:
                break
        return sizes

    def shape(self, arg: Arg, sizes: dict[Sym, int]) -> tuple[int, ...]:
        return tuple(size_of(d, sizes) for d in arg.dims)

    def arguments(self, sizes: dict[Sym, int], rng: np.random.Generator) -> list[np.ndarray]:
        """Random arguments: floats in [-1.5, 1.5), indices in [-n, n) for an axis of n,
        Python ints in 0..3."""
        out: list[Any] = []
        for arg in self.args:
            shape = self.shape(arg, sizes)
            if arg.python_int:
                out.append(int(rng.integers(0, 4)))
            elif arg.bound is None:
                out.append(rng.uniform(-1.5, 1.5, shape))
            else:
                n = size_of(arg.bound, sizes)
                out.append(rng.integers(-n, n, shape, dtype=np.int64))
        return out

    def describe(self, sizes: dict[Sym, int]) -> str:
        """The argument shapes, e.g. `x0: (3, 1), i0: (2,) int64`."""
        return ", ".join(f"{a.name}: int" if a.python_int else f"{a.name}: "
                         f"{self.shape(a, sizes)}" + ("" if a.bound is None else " int64")
                         for a in self.args)

    def function(self, tag: str = "selfcheck") -> Callable[..., Any]:
        """The program as a Python function (its source registered in linecache, so that
        tracebacks and tapejit's messages show its lines)."""
        import tapejit
        filename = f"<{tag} {abs(hash(self.source)):x}>"
        source = self.source
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        scope: dict[str, Any] = {"np": np, "tj": tapejit}
        if "sp." in source:                 # statement_templates' special template (scipy)
            import scipy.special
            scope["sp"] = scipy.special
        exec(compile(source, filename, "exec"), scope)
        return scope["f"]

    def upto(self, name: str) -> "RandomProgram":
        """The program that returns the value `name`, without the statements it does not
        need (a smaller program for a failure report)."""
        needed, kept = {name}, []
        for line in reversed(self.lines):
            if line.name in needed:
                needed |= set(line.reads)
                kept.append(line)
        args = tuple(a for a in self.args if a.name in needed)
        return dataclasses.replace(self, args=args, lines=tuple(reversed(kept)), output=name)

