"""docs/api.md's table of every supported numpy and scipy name, made from the op table.

Each name a row of tests/op_db.py covers (`covers=`: ufuncs, functions, np.array & co, methods,
operators) is one line of the table, with whether it is differentiated (some covering row
checks its gradient) or has zero gradient. tests/test_docs.py checks that the lines between
the markers in docs/api.md are exactly these, so adding a function without documenting it (or
documenting one without a row) fails; after adding rows run

    python tests/doc_table.py --update docs/api.md

which rewrites the lines between the markers (one line per name: a new function is a new line).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

from tapejit.trace import METHOD_RULES, Tracer

BEGIN = ("<!-- supported names: made from tests/op_db.py's rows by "
         "`python tests/doc_table.py --update docs/api.md`; checked by tests/test_docs.py -->")
END = "<!-- end of supported names -->"
HEADER = ["| name | kind | gradient |", "|---|---|---|"]

_OPERATORS = {"add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
              "pow": "**", "matmul": "@", "and": "&", "or": "|", "xor": "^", "lt": "<",
              "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "neg": "-x",
              "pos": "+x", "abs": "abs(x)", "invert": "~x", "getitem": "x[key]",
              "setitem": "x[key] = v"}
_OPERATORS["or"] = "\\|"            # (a | in a Markdown table's cell is escaped)
_ORDER = ["ufunc", "function", "constructor", "method", "ufunc method", "operator"]
_UFUNC_METHODS = {      # which ufuncs each method is supported for
    "at": "np.add.at, np.subtract.at",
    "accumulate": "np.add / multiply / maximum / minimum .accumulate",
    "reduce": "np.add / multiply / maximum / minimum / logical_or / logical_and .reduce",
    "__call__": "a ufunc's out= (and where= with it): into a traced array or one made in the "
                "function"}


def _namespaces() -> list[tuple[str, Any]]:
    spaces = [("np", np), ("np.linalg", np.linalg), ("np.fft", np.fft)]
    try:
        import scipy.special
        spaces.append(("scipy.special", scipy.special))
    except ImportError:
        pass
    return spaces


def _public(obj: Any) -> str:
    """Where a user finds `obj`: np.x, np.linalg.x, scipy.special.x."""
    for prefix, module in _namespaces():
        if getattr(module, obj.__name__, None) is obj:
            return f"{prefix}.{obj.__name__}"
    return f"{obj.__module__}.{obj.__name__}"


def entry(cover: Any) -> tuple[str, str]:
    """(kind, name as shown) of one `covers=` item."""
    if isinstance(cover, np.ufunc):
        return "ufunc", _public(cover)
    if not isinstance(cover, str):
        return "function", _public(cover)
    kind, name = cover.split(":")
    if kind == "constructor":
        return "constructor", f"np.{name}"
    if kind == "operator":
        base = name.strip("_")
        base = base[1:] if base[1:] in _OPERATORS and base not in _OPERATORS else base
        return "operator", _OPERATORS[base]
    if name in METHOD_RULES:
        return "ufunc method", _UFUNC_METHODS.get(name, f"ufunc.{name}")
    is_property = isinstance(getattr(Tracer, name, None), property)
    return "method", f"x.{name}" if is_property else f"x.{name}()"


def table() -> list[str]:
    """The table's lines: one per name, in kind order, then by name."""
    sys.path.insert(0, str(Path(__file__).parent))
    from op_db import ROWS
    gradient: dict[tuple[str, str], bool] = {}
    for row in ROWS:
        for cover in row.covers:
            key = entry(cover)
            gradient[key] = gradient.get(key, False) or row.diff
    keys = sorted(gradient, key=lambda k: (_ORDER.index(k[0]), k[1]))
    return HEADER + [f"| `{name}` | {kind} | {'yes' if gradient[kind, name] else 'zero'} |"
                     for kind, name in keys]


def current(doc: Path) -> list[str]:
    """The lines between the markers of `doc`."""
    lines = doc.read_text().splitlines()
    return lines[lines.index(BEGIN) + 1:lines.index(END)]


def update(doc: Path) -> None:
    lines = doc.read_text().splitlines()
    start, stop = lines.index(BEGIN), lines.index(END)
    doc.write_text("\n".join(lines[:start + 1] + table() + lines[stop:]) + "\n")


if __name__ == "__main__":
    if sys.argv[1:2] != ["--update"] or len(sys.argv) != 3:
        sys.exit("usage: python tests/doc_table.py --update docs/api.md")
    update(Path(sys.argv[2]))
