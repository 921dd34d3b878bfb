"""Flatten and unflatten nested containers of arrays (pytrees).

Containers: dict, list, tuple, namedtuple, dataclass instances and None (an empty container).
Everything else is a leaf. A dict's keys are taken in sorted order, as JAX takes them: the same
dict built in another order has the same structure (and signature), and a dict rebuilt from
leaves has its keys sorted. Keys of types that do not compare are sorted by type name, then
repr. A `TreeDef` is hashable, so
it can be part of a cache key, and prints readably in error messages.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, NamedTuple

from .errors import user_error

Leaf = Any


class TreeDef(NamedTuple):
    """The structure of a pytree: a node kind, its static metadata and its children."""

    kind: str  # "leaf", "none", "tuple", "list", "dict", "namedtuple", "dataclass"
    meta: Any  # dict keys, the namedtuple/dataclass type, or None
    children: tuple["TreeDef", ...]

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __str__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(map(str, self.children))
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c}" for k, c in zip(self.meta, self.children))
            return "{" + inner + "}"
        if self.kind == "list":
            return f"[{inner}]"
        if self.kind == "tuple":
            return f"({inner}{',' if len(self.children) == 1 else ''})"
        return f"{self.meta.__name__}({inner})"


LEAF = TreeDef("leaf", None, ())


def _node(obj: Any) -> tuple[str, Any, list[Any]] | None:
    """(kind, meta, children) for a container, None for a leaf."""
    if obj is None:
        return "none", None, []
    if isinstance(obj, dict):
        keys = _sorted_keys(obj)
        return "dict", keys, [obj[k] for k in keys]
    if isinstance(obj, list):
        return "list", None, obj
    if isinstance(obj, tuple):
        if hasattr(type(obj), "_fields"):
            return "namedtuple", type(obj), list(obj)
        return "tuple", None, list(obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        names = tuple(f.name for f in dataclasses.fields(obj))
        return "dataclass", (type(obj), names), [getattr(obj, n) for n in names]
    return None


def _sorted_keys(d: dict) -> tuple:
    try:
        return tuple(sorted(d))
    except TypeError:                   # keys that do not compare (mixed types)
        return tuple(sorted(d, key=lambda k: (type(k).__qualname__, repr(k))))


def flatten(tree: Any) -> tuple[list[Leaf], TreeDef]:
    """Leaves in order, and the structure to rebuild the tree from them."""
    leaves: list[Leaf] = []

    def walk(obj: Any) -> TreeDef:
        node = _node(obj)
        if node is None:
            leaves.append(obj)
            return LEAF
        kind, meta, children = node
        return TreeDef(kind, meta, tuple(walk(c) for c in children))

    return leaves, walk(tree)


def unflatten(treedef: TreeDef, leaves: Any) -> Any:
    """Rebuild a tree of `treedef`'s structure from an iterable of leaves."""
    it = iter(leaves)
    tree = _build(treedef, it)
    if next(it, _END) is not _END:
        raise ValueError(f"too many leaves for tree structure {treedef}")
    return tree


_END = object()


def _build(td: TreeDef, it: Iterator[Leaf]) -> Any:
    if td.kind == "leaf":
        leaf = next(it, _END)
        if leaf is _END:
            raise ValueError("too few leaves for tree structure")
        return leaf
    children = [_build(c, it) for c in td.children]
    if td.kind == "none":
        return None
    if td.kind == "dict":
        return dict(zip(td.meta, children))
    if td.kind == "list":
        return children
    if td.kind == "tuple":
        return tuple(children)
    if td.kind == "namedtuple":
        return td.meta(*children)
    cls, names = td.meta
    obj = cls.__new__(cls)
    for name, value in zip(names, children):
        object.__setattr__(obj, name, value)
    return obj


def leaf_paths(tree: Any, root: str) -> list[str]:
    """A readable path for each leaf, e.g. `params['w'][0]` -> `params_w_0` (identifier-safe)."""
    paths: list[str] = []

    def walk(obj: Any, path: str) -> None:
        node = _node(obj)
        if node is None:
            paths.append(path)
            return
        kind, meta, children = node
        if kind == "dict":
            keys: Any = meta
        elif kind == "dataclass":
            keys = meta[1]
        elif kind == "namedtuple":
            keys = meta._fields
        else:
            keys = range(len(children))
        for key, child in zip(keys, children):
            walk(child, f"{path}_{key}")

    walk(tree, root)
    return paths


def difference(a: TreeDef, b: TreeDef, first: str, second: str, path: str = "") -> str:
    """Where structure `b` first differs from `a`, in words (`first`, `second` name them)."""
    where = f"at {path}" if path else "at the top"
    if a.kind != b.kind or (a.kind in ("namedtuple", "dataclass") and a.meta != b.meta):
        return f"{where}, {first} has {_describe(a)} and {second} {_describe(b)}"
    keys = list(a.meta) if a.kind == "dict" else list(range(len(a.children)))
    if a.kind == "dict" and a.meta != b.meta:
        for k in a.meta:
            if k not in b.meta:
                return f"key {k!r} {where} is in {first} but not in {second}"
        for k in b.meta:
            if k not in a.meta:
                return f"key {k!r} {where} is in {second} but not in {first}"
    if len(a.children) != len(b.children):
        return f"{where}, {first} has {_describe(a)} and {second} {_describe(b)}"
    for k, ca, cb in zip(keys, a.children, b.children):
        if ca != cb:
            return difference(ca, cb, first, second, f"{path}[{k!r}]")
    return "the structures differ"


def tree_difference(a: Any, b: Any, first: str, second: str) -> str | None:
    """Where tree `b` first differs from `a` in structure or in a leaf's shape, in words
    (`first`, `second` name them); None where they agree."""
    (a_leaves, a_td), (b_leaves, b_td) = flatten(a), flatten(b)
    if a_td != b_td:
        return difference(a_td, b_td, first, second)
    for path, x, y in zip(leaf_paths(a, "params"), a_leaves, b_leaves):
        x_shape, y_shape = getattr(x, "shape", ()), getattr(y, "shape", ())
        if x_shape != y_shape:
            return f"{path} has shape {x_shape} in {first}, {y_shape} in {second}"
    return None


def _describe(td: TreeDef) -> str:
    if td.kind == "leaf":
        return "a leaf"
    if td.kind == "none":
        return "None"
    name = {"namedtuple": lambda: td.meta.__name__, "dataclass": lambda: td.meta[0].__name__
            }.get(td.kind, lambda: td.kind)()
    return f"a {name} of {len(td.children)}"


def tree_map(fn: Callable[..., Any], tree: Any, *rest: Any) -> Any:
    """Apply `fn` leaf-wise over trees of the same structure."""
    leaves, td = flatten(tree)
    others = []
    for r in rest:
        r_leaves, r_td = flatten(r)
        if r_td != td:
            where = difference(td, r_td, "the first tree", "the other")
            raise user_error(f"tree_map: a tree has structure {r_td}, but the first tree has "
                             f"structure {td}: {where}")
        others.append(r_leaves)
    return unflatten(td, [fn(*xs) for xs in zip(leaves, *others)])
