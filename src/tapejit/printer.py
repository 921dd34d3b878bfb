"""The text form of a tape, and its parser (`parse_tape(print_tape(t)) == t`).

Grammar (one equation per line; `#` comments carry the user's source line):

    tape   := "{ lambda" binder* [";" binder*] "." NEWLINE
              "let" eqn* ["# reverse" eqn*] "in (" atom ("," atom)* ") }"
    eqn    := binder+ "=" opname ["[" name "=" pyliteral ("," ...)* "]"] atom* ["# file.py:line"]
    binder := name ":" type          type := dtype "[" dims "]"  (e.g. f64[3,4], i64[])
    atom   := name | pyliteral ":" type                             (e.g. 2.0:f64[])

Constant values are not part of the text: `parse_tape` takes them as an argument.
"""
from __future__ import annotations

import ast
import os
import re
from typing import Any, Sequence

import numpy as np

from .avals import DTYPES_BY_NAME, Aval
from .errors import IRError
from .ir import Atom, Eqn, Lit, Tape, Var, make_params

_INDENT = "      "


def _binder(v: Var) -> str:
    return f"{v.name}:{v.aval}"


def _params(eqn: Eqn) -> str:
    if not eqn.params:
        return ""
    return "[" + ", ".join(f"{k}={v!r}" for k, v in eqn.params) + "]"


def print_eqn(eqn: Eqn, show_src: bool = False) -> str:
    text = " ".join([*map(_binder, eqn.outs), "=", eqn.op + _params(eqn), *map(str, eqn.ins)])
    if show_src and eqn.src is not None:
        text += f"  # {os.path.basename(eqn.src[0])}:{eqn.src[1]}"
    return text


def print_tape(tape: Tape, show_src: bool = True) -> str:
    head = " ".join(["{ lambda", *map(_binder, tape.invars)])
    if tape.constvars:
        head += " ; " + " ".join(map(_binder, tape.constvars))
    lines = [head + " ."]
    for i, eqn in enumerate(tape.eqns):
        if i == tape.reverse_start:
            lines.append(("  let " if i == 0 else _INDENT) + "# reverse")
        prefix = "  let " if len(lines) == 1 else _INDENT
        lines.append(prefix + print_eqn(eqn, show_src))
    if len(lines) == 1:
        lines.append("  let")
    lines.append("  in ( " + ", ".join(map(str, tape.outvars)) + " ) }")
    return "\n".join(lines)


# ---- parsing ------------------------------------------------------------------------------------
_TYPE = re.compile(r"^([a-z0-9]+)\[([0-9,]*)\]$")


def _parse_aval(text: str) -> Aval:
    m = _TYPE.match(text)
    if not m or m.group(1) not in DTYPES_BY_NAME:
        raise IRError(f"cannot parse type {text!r}")
    dims = tuple(int(d) for d in m.group(2).split(",") if d)
    return Aval(dims, DTYPES_BY_NAME[m.group(1)])


def _parse_binder(text: str) -> Var:
    name, _, typ = text.partition(":")
    return Var(name, _parse_aval(typ))


def _parse_atom(text: str, env: dict[str, Var]) -> Atom:
    if text in env:
        return env[text]
    value, sep, typ = text.rpartition(":")
    if not sep:
        raise IRError(f"unknown variable {text!r}")
    aval = _parse_aval(typ)
    special = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
    return Lit(special[value] if value in special else ast.literal_eval(value), aval)


def _parse_params(text: str) -> dict[str, Any]:
    call = ast.parse(f"f({text})", mode="eval").body
    assert isinstance(call, ast.Call)
    return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}


def _parse_eqn(line: str, env: dict[str, Var]) -> Eqn:
    src = None
    if "  # " in line:
        line, _, where = line.partition("  # ")
        file, _, lineno = where.rpartition(":")
        src = (file, int(lineno))
    lhs, _, rhs = line.partition(" = ")
    outs = tuple(_parse_binder(b) for b in lhs.split())
    rhs = rhs.strip()
    op, params = rhs.split(" ", 1)[0], {}
    rest = rhs[len(op):]
    if "[" in op:
        start = rhs.index("[")
        depth, end = 0, start
        for end, ch in enumerate(rhs[start:], start):
            depth += {"[": 1, "]": -1}.get(ch, 0)
            if depth == 0:
                break
        op, params, rest = rhs[:start], _parse_params(rhs[start + 1:end]), rhs[end + 1:]
    ins = tuple(_parse_atom(a, env) for a in rest.split())
    for v in outs:
        env[v.name] = v
    return Eqn(op, ins, outs, make_params(params), src)


def parse_tape(text: str, consts: Sequence[np.ndarray] | None = None) -> Tape:
    """Parse the text form. `consts` supplies the constant arrays (zeros if omitted)."""
    lines = [ln.strip() for ln in text.strip().splitlines()]
    if not lines or not lines[0].startswith("{ lambda") or not lines[0].endswith("."):
        raise IRError("a tape starts with '{ lambda ... .'")
    binders, _, const_binders = lines[0][len("{ lambda"):-1].partition(";")
    invars = tuple(_parse_binder(b) for b in binders.split())
    constvars = tuple(_parse_binder(b) for b in const_binders.split())
    env = {v.name: v for v in invars + constvars}
    eqns: list[Eqn] = []
    reverse_start = None
    for line in lines[1:-1]:
        if line == "let" or line.startswith("let "):
            line = line[3:].strip()
        if line == "# reverse":
            reverse_start = len(eqns)
        elif line:
            eqns.append(_parse_eqn(line, env))
    last = lines[-1]
    if not (last.startswith("in (") and last.endswith(") }")):
        raise IRError("a tape ends with 'in ( ... ) }'")
    outs = [a.strip() for a in last[len("in ("):-len(") }")].split(",") if a.strip()]
    if consts is None:
        consts = [np.zeros(v.aval.shape, v.aval.dtype) for v in constvars]
    return Tape(invars, tuple(eqns), tuple(_parse_atom(a, env) for a in outs),
                constvars, tuple(np.asarray(c) for c in consts), reverse_start)
