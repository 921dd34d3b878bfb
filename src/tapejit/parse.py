"""Reading a tape back from its text form (ir.py prints it): `parse_tape(print_tape(t)) == t`.

Grammar (one equation per line; `#` comments carry the user's source line):

    tape   := "{ lambda" binder* [";" binder*] "." NEWLINE
              "let" eqn* ["# reverse" eqn*] "in (" atom ("," atom)* ") }"
    eqn    := binder+ "=" opname ["[" name "=" pyliteral ("," ...)* "]"] atom* ["# file.py:line"]
    binder := name ":" type          type := dtype "[" dims "]"  (e.g. f64[3,4], i64[])
    atom   := name | pyliteral ":" type                             (e.g. 2.0:f64[])

A param holding a tape (a sub-tape: loop body, branch, fused group) reads `name=...` in the
brackets, and the sub-tape follows the eqn's line, indented, as `name = { lambda ... }`.

Constant values are not part of the text: `parse_tape` takes them as an argument.
"""
from __future__ import annotations

import ast
import re
from typing import Any, Sequence

import numpy as np

from .avals import DTYPES_BY_NAME, Aval
from .errors import IRError
from .ir import Atom, Eqn, Lit, Tape, Var, make_params

_TYPE = re.compile(r"^([a-z0-9]+)\[((?:[0-9]+(?:,[0-9]+)*)?)\]$")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SPECIAL = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


def _parse_aval(text: str) -> Aval:
    m = _TYPE.match(text)
    if not m or m.group(1) not in DTYPES_BY_NAME:
        raise IRError(f"cannot parse type {text!r} (expected e.g. f64[3,4] or i64[])")
    dims = tuple(int(d) for d in m.group(2).split(",") if d)
    return Aval(dims, DTYPES_BY_NAME[m.group(1)])


def _parse_binder(text: str) -> Var:
    name, sep, typ = text.partition(":")
    if not sep or not _NAME.match(name):
        raise IRError(f"cannot parse binder {text!r} (expected name:type, e.g. x:f64[3])")
    return Var(name, _parse_aval(typ))


def _parse_atom(text: str, env: dict[str, Var]) -> Atom:
    if text in env:
        return env[text]
    value, sep, typ = text.rpartition(":")
    if not sep:
        raise IRError(f"unknown variable {text!r}")
    aval = _parse_aval(typ)
    if value in _SPECIAL:
        return Lit(_SPECIAL[value], aval)
    try:
        literal = ast.literal_eval(value)
    except (ValueError, SyntaxError):
        literal = None
    if type(literal) not in (bool, int, float):
        raise IRError(f"cannot parse literal {text!r} (expected e.g. 2.0:f64[] or True:bool[])")
    return Lit(literal, aval)


def _parse_params(text: str) -> dict[str, Any]:
    try:
        call = ast.parse(f"f({text})", mode="eval").body
        assert isinstance(call, ast.Call) and not call.args
        return {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
    except (ValueError, SyntaxError, AssertionError):
        raise IRError(f"cannot parse params [{text}] (expected [name=literal, ...])") from None


def _split_op(rhs: str) -> tuple[str, dict[str, Any], str]:
    """`op[params] atoms` -> (op, params, atoms text)."""
    op = re.match(r"[A-Za-z_][A-Za-z0-9_]*", rhs)
    if op is None:
        raise IRError(f"expected an op name after '=', got {rhs!r}")
    end = op.end()
    if not rhs.startswith("[", end):
        return op.group(), {}, rhs[end:]
    depth = 0
    for i, ch in enumerate(rhs[end:], end):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth == 0:
            return op.group(), _parse_params(rhs[end + 1:i]), rhs[i + 1:]
    raise IRError(f"unbalanced '[' in {rhs!r}")


def _parse_eqn(line: str, env: dict[str, Var]) -> Eqn:
    src = None
    if "  # " in line:
        line, _, where = line.partition("  # ")
        file, _, lineno = where.strip().rpartition(":")
        if not file or not lineno.isdigit():
            raise IRError(f"cannot parse source comment {where!r} (expected file.py:LINE)")
        src = (file, int(lineno))
    lhs, sep, rhs = line.partition(" = ")
    if not sep or not lhs.strip():
        raise IRError("expected 'name:type = op atoms'")
    outs = tuple(_parse_binder(b) for b in lhs.split())
    op, params, rest = _split_op(rhs.strip())
    ins = tuple(_parse_atom(a, env) for a in rest.split())
    for v in outs:
        env[v.name] = v
    return Eqn(op, ins, outs, make_params(params), src)


_SUB_TAPE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*) = (\{ lambda)")


def _sub_tape(first: str, lines: Any) -> Tape:
    """Parse the sub-tape starting with line `first`, taking the rest of it from `lines`."""
    text, depth = [first], 1
    while depth:
        try:
            _, line = next(lines)
        except StopIteration:
            raise IRError(f"a sub-tape starting `{first}` is not closed") from None
        text.append(line)
        depth += bool(_SUB_TAPE.match(line)) - line.endswith(") }")
    return parse_tape("\n".join(text))


def _attach(eqns: list[Eqn], key: str, body: Tape, number: int) -> None:
    """Fill the `key=...` param of the last eqn with its sub-tape."""
    params = dict(eqns[-1].params) if eqns else {}
    if params.get(key, None) is not Ellipsis:
        raise IRError(f"line {number}: sub-tape {key} follows no eqn with a param {key}=...")
    params[key] = body
    last = eqns[-1]
    eqns[-1] = Eqn(last.op, last.ins, last.outs, make_params(params), last.src)


def parse_tape(text: str, consts: Sequence[np.ndarray] | None = None) -> Tape:
    """Parse the text form. `consts` supplies the constant arrays (zeros if omitted).

    Raises IRError, naming the line, on malformed text. The result is not typechecked."""
    lines = [ln.strip() for ln in text.strip().splitlines()]
    if len(lines) < 2 or not lines[0].startswith("{ lambda") or not lines[0].endswith("."):
        raise IRError("a tape starts with '{ lambda ... .' and ends with 'in ( ... ) }'")
    binders, _, const_binders = lines[0][len("{ lambda"):-1].partition(";")
    invars = tuple(_parse_binder(b) for b in binders.split())
    constvars = tuple(_parse_binder(b) for b in const_binders.split())
    env = {v.name: v for v in invars + constvars}
    eqns: list[Eqn] = []
    reverse_start = None
    body = iter(enumerate(lines[1:-1], 2))
    for number, line in body:
        if line == "let" or line.startswith("let "):
            line = line[3:].strip()
        block = _SUB_TAPE.match(line)
        if block:
            _attach(eqns, block.group(1), _sub_tape(line[block.start(2):], body), number)
        elif line == "# reverse":
            if reverse_start is not None:
                raise IRError(f"line {number}: a second '# reverse'")
            reverse_start = len(eqns)
        elif line:
            try:
                eqns.append(_parse_eqn(line, env))
            except IRError as err:
                raise IRError(f"line {number} `{line}`: {err}") from None
    last = lines[-1]
    if not (last.startswith("in (") and last.endswith(") }")):
        raise IRError("a tape ends with 'in ( ... ) }'")
    outs = [a.strip() for a in last[len("in ("):-len(") }")].split(",") if a.strip()]
    if consts is None:
        consts = [np.zeros(v.aval.shape, v.aval.dtype) for v in constvars]
    if len(consts) != len(constvars):
        raise IRError(f"the tape has {len(constvars)} constants but {len(consts)} were given")
    return Tape(invars, tuple(eqns), tuple(_parse_atom(a, env) for a in outs),
                constvars, tuple(np.asarray(c) for c in consts), reverse_start)
