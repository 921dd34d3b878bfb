"""Alias scopes: which array reads and writes of a function cannot touch the same memory,
told to LLVM as `!alias.scope` / `!noalias` metadata. Without them LLVM must assume a store
into one array may change any other: it reloads loop-invariant values after every store and
vectorises a loop only behind run-time overlap checks, which it gives up on where it cannot
compute an array's range ("cannot identify array bounds") or where the checks cost more than
a short loop gains.

Each buffer the function's code allocated (a frame, a workspace array, a `malloc`) is a scope
of its own; the arrays it was given (the entry's inputs, a function's array arguments) share
one scope, as they may overlap each other but none of those. An access through an array
variable or a call's result (which may hold any of them) gets no scope, so LLVM assumes
nothing about it. Views and reshapes are their buffer's scope.

Accesses are marked while the function is written (`mark`); `attach` turns the marks into
metadata once the function's scopes are all known, numbered from the module's counter so
that the IR text is the same in every process. Scopes are told apart per top-level statement
(a loop nest, where they matter), so that the metadata grows with a nest's arrays, not with
the square of a large program's.
"""
from __future__ import annotations

from .emit import Function

GIVEN = "(given)"          # the scope of the arrays a function was given
_MARK = "  ; tj-scope "    # ends the line of a marked access until `attach`


def key(root: str, distinct: set[str], given: set[str]) -> str | None:
    """The scope of an access to an array whose buffer is `root`, if it has one."""
    root = root.split("@")[0]               # a view: its buffer's
    if root in distinct and root in given:  # (a name rebound: which buffer is unknown)
        return None
    if root in distinct:
        return root
    if root in given:
        return GIVEN
    return None


def mark(scope: str | None, group: int) -> str:
    """What ends the line of an access in statement `group` of the function's top level: its
    scope, for `attach` to replace."""
    return "" if scope is None else f"{_MARK}{group} {scope}"


def attach(fn: Function, first: int) -> int:
    """Replace `fn`'s marks by metadata numbered from `first`; returns the next free number.
    Scopes are told apart within each top-level statement (a loop nest) that accesses two or
    more: the lists stay as long as a nest's arrays are many, not the function's."""
    groups: dict[str, set[str]] = {}
    for line in fn.lines:
        if _MARK in line:
            group, scope = line.split(_MARK)[1].split(" ", 1)
            groups.setdefault(group, set()).add(scope)
    groups = {g: scopes for g, scopes in groups.items() if len(scopes) > 1}
    scopes = sorted(set().union(*groups.values()))
    ids = {s: first + 1 + k for k, s in enumerate(scopes)}
    lines = [f'!{first} = distinct !{{!{first}, !"{fn.name}"}}'] if scopes else []
    for s in scopes:
        lines.append(f'!{ids[s]} = distinct !{{!{ids[s]}, !{first}, !"{s}"}}')
        lines.append(f"!{ids[s] + len(scopes)} = !{{!{ids[s]}}}")      # its list
    number = first + 1 + 2 * len(scopes)
    others: dict[tuple[str, str], int] = {}    # (group, scope): the list of the group's others
    for g, used in sorted(groups.items()):
        for s in sorted(used):
            others[g, s] = number
            rest = ", ".join(f"!{ids[t]}" for t in sorted(used - {s}))
            lines.append(f"!{number} = !{{{rest}}}")
            number += 1
    for k, line in enumerate(fn.lines):
        if _MARK in line:
            text, tail = line.split(_MARK)
            group, scope = tail.split(" ", 1)
            own = ids.get(scope, 0) + len(scopes)
            fn.lines[k] = text if group not in groups else \
                f"{text}, !alias.scope !{own}, !noalias !{others[group, scope]}"
    fn.metadata += lines
    return number
