"""The IR's invariants: `typecheck` names each violation with an IRError, `parse_tape` rejects
malformed text with an IRError, and printed eqns point at the user's source line."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

import tapejit as tj
from tapejit.avals import Aval
from tapejit.errors import IRError, TapejitError
from tapejit.ir import Eqn, Lit, Tape, Var, print_tape
from tapejit.parse import parse_tape
from tapejit.typecheck import typecheck

F64 = np.dtype(np.float64)
X = Var("x", Aval((3,), F64))
V1 = Var("v1", Aval((3,), F64))
V2 = Var("v2", Aval((3,), F64))


def good() -> Tape:
    """x -> v1 = exp x; v2 = mul v1 c1 (c1 a constant)."""
    c1 = Var("c1", Aval((3,), F64))
    return Tape((X,), (Eqn("exp", (X,), (V1,), ()), Eqn("mul", (V1, c1), (V2,), ())), (V2,),
                (c1,), (np.arange(3.0),))


def with_eqns(*eqns: Eqn, outvars=None, **changes) -> Tape:
    tape = dataclasses.replace(good(), eqns=eqns, **changes)
    return dataclasses.replace(tape, outvars=outvars if outvars is not None
                               else (eqns[-1].outs[0],))


def test_a_good_tape_typechecks():
    typecheck(good())
    assert issubclass(IRError, TapejitError) and issubclass(IRError, ValueError)


@pytest.mark.parametrize("tape,message", [
    (with_eqns(Eqn("mul", (V1, X), (V2,), ()), Eqn("exp", (X,), (V1,), ())),
     "v1 is read before it is defined"),
    (with_eqns(Eqn("exp", (X,), (V1,), ()), Eqn("neg", (X,), (V1,), ())),
     "v1 is defined twice"),
    (with_eqns(Eqn("exp", (X,), (X,), ())), "x is defined twice"),
    (with_eqns(Eqn("exp", (X,), (Var("v1", Aval((3,), np.dtype(np.float32))),), ())),
     "output should be f64[3], not f32[3]"),
    (with_eqns(Eqn("exp", (X,), (Var("v1", Aval((4,), F64)),), ())),
     "output should be f64[3], not f64[4]"),
    (with_eqns(Eqn("frobnicate", (X,), (V1,), ())), "unknown op frobnicate"),
    (with_eqns(Eqn("add", (X, Lit(1.0, Aval((3,), F64))), (V1,), ())), "is not a scalar"),
    (with_eqns(Eqn("add", (X, Lit(1, Aval((), F64))), (V1,), ())), "holds a int"),
    (with_eqns(Eqn("add", (X, Lit(np.float64(1.0), Aval((), F64))), (V1,), ())),
     "holds a float64"),
    (with_eqns(Eqn("convert", (X,), (Var("v1", Aval((3,), np.dtype(np.float32))),),
                   (("dtype", "f32"),)),
               Eqn("add", (Var("v1", Aval((3,), np.dtype(np.float32))),
                           Lit(0.1, Aval((), np.dtype(np.float32)))),
                   (Var("v2", Aval((3,), np.dtype(np.float32))),), ())),
     "not exactly representable as float32"),
    (with_eqns(Eqn("add", (X, X, X), (V1,), ())),
     "eqn `v1:f64[3] = add x x x`: add takes 2 operand(s), got 3"),
    (with_eqns(Eqn("exp", (X,), (V1, V2), ())), "exactly one output"),
    (with_eqns(Eqn("exp", (Var("x", Aval((4,), F64)),), (V1,), ())),
     "x is read as f64[4] but defined as f64[3]"),
    (with_eqns(Eqn("exp", (X,), (V1,), ()), outvars=(V2,)), "outputs: v2 is read before"),
    (dataclasses.replace(good(), consts=(np.arange(4.0),)),
     "constant c1:f64[3] holds an array of aval f64[4]"),
    (dataclasses.replace(good(), consts=(np.arange(3),)),
     "constant c1:f64[3] holds an array of aval i64[3]"),
    (dataclasses.replace(good(), consts=()), "1 constant vars but 0 constant arrays"),
    (dataclasses.replace(good(), reverse_start=3), "reverse_start 3 is outside"),
    (dataclasses.replace(good(), constvars=(X,), consts=(np.zeros(3),)), "x is defined twice"),
])
def test_typecheck_names_each_violation(tape, message):
    with pytest.raises(IRError, match=None) as info:
        typecheck(tape)
    assert message in str(info.value)


def test_typecheck_errors_show_the_eqn():
    bad = with_eqns(Eqn("exp", (X,), (Var("v1", Aval((4,), F64)),), ()))
    with pytest.raises(IRError, match=r"eqn `v1:f64\[4\] = exp x`: output should be f64\[3\]"):
        typecheck(bad)


GOOD_TEXT = """{ lambda x:f64[3] .
  let v1:f64[3] = exp x  # model.py:3
      v2:f64[] = reduce_sum[axes=(0,)] v1
  in ( v2 ) }"""


def test_good_text_parses():
    tape = parse_tape(GOOD_TEXT)
    typecheck(tape)
    assert print_tape(tape) == GOOD_TEXT


@pytest.mark.parametrize("text,message", [
    ("", "a tape starts with"),
    ("lambda x:f64[3] .\n  let\n  in ( x ) }", "a tape starts with"),
    ("{ lambda x:f64[3] .\n  let\n  in ( x )", "a tape ends with"),
    ("{ lambda x:f64[3] .\n  let v1:f64[3] = exp x", "a tape ends with"),
    ("{ lambda x:float[3] .\n  let\n  in ( x ) }", "cannot parse type 'float[3]'"),
    ("{ lambda x:f64[3,,4] .\n  let\n  in ( x ) }", "cannot parse type"),
    ("{ lambda x .\n  let\n  in ( x ) }", "cannot parse binder 'x'"),
    ("{ lambda 1x:f64[] .\n  let\n  in ( 1x ) }", "cannot parse binder"),
    ("{ lambda x:f64[3] .\n  let v1:f64[3] exp x\n  in ( v1 ) }", "line 2 `v1:f64[3] exp x`"),
    ("{ lambda x:f64[3] .\n  let v1:f64[3] = exp y\n  in ( v1 ) }", "unknown variable 'y'"),
    ("{ lambda x:f64[3] .\n  let v1:f64[3] = add x 1.0.0:f64[]\n  in ( v1 ) }",
     "cannot parse literal '1.0.0:f64[]'"),
    ("{ lambda x:f64[3] .\n  let v1:f64[3] = add x 'a':f64[]\n  in ( v1 ) }",
     "cannot parse literal"),
    ("{ lambda x:f64[3] .\n  let v1:f64[] = reduce_sum[axes=(0,] x\n  in ( v1 ) }",
     "cannot parse params"),
    ("{ lambda x:f64[3] .\n  let v1:f64[] = reduce_sum[axes=(0,) x\n  in ( v1 ) }",
     "unbalanced '['"),
    ("{ lambda x:f64[3] .\n  let v1:f64[] = reduce_sum[axes=foo] x\n  in ( v1 ) }",
     "cannot parse params"),
    ("{ lambda x:f64[3] .\n  let v1:f64[3] = = x\n  in ( v1 ) }", "expected an op name"),
    ("{ lambda x:f64[3] .\n  let v1:f64[3] = exp x  # model.py\n  in ( v1 ) }",
     "cannot parse source comment"),
    ("{ lambda x:f64[3] .\n  let # reverse\n      # reverse\n  in ( x ) }",
     "a second '# reverse'"),
    ("{ lambda x:f64[3] .\n  let\n  in ( y ) }", "unknown variable 'y'"),
])
def test_parse_rejects_malformed_text(text, message):
    with pytest.raises(IRError) as info:
        parse_tape(text)
    assert message in str(info.value)


def test_parse_checks_the_number_of_constants():
    text = print_tape(good())
    with pytest.raises(IRError, match="1 constants but 2 were given"):
        parse_tape(text, consts=[np.zeros(3), np.zeros(3)])


def test_parse_does_not_typecheck_but_typecheck_catches_it():
    tape = parse_tape("{ lambda x:f64[3] .\n  let v1:f64[4] = exp x\n  in ( v1 ) }")
    with pytest.raises(IRError, match="output should be f64"):
        typecheck(tape)


def test_printed_eqns_show_the_users_source_line():
    def f(x, w):
        y = x * w  # line A
        return np.sum(np.exp(y))  # line B

    line_a = f.__code__.co_firstlineno + 1
    tape = tj.make_tape(f)(np.ones((3, 4)), np.arange(4.0))
    here = os.path.basename(__file__)
    lines = print_tape(tape).splitlines()
    assert lines[1].endswith(f"= mul x w  # {here}:{line_a}")
    assert lines[2].endswith(f"= exp v1  # {here}:{line_a + 1}")
    assert lines[3].endswith(f"# {here}:{line_a + 1}")
    assert all(e.src is not None and e.src[0] == __file__ for e in tape.eqns)
    assert "#" not in print_tape(tape, show_src=False)
    joint = tj.make_tape(tj.grad(f))(np.ones((3, 4)), np.arange(4.0))
    after = print_tape(joint).split("# reverse")[1]
    assert f"# {here}:{line_a}" in after  # the reverse sweep points at the primal lines


def test_eqns_and_tapes_are_frozen_and_hashable():
    tape = good()
    with pytest.raises(AttributeError):   # eqns are immutable (NamedTuples)
        tape.eqns[0].op = "neg"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        tape.eqns = ()  # type: ignore[misc]
    assert hash(tape) == hash(good()) and tape == good()
    moved = Eqn("exp", (X,), (V1,), (), ("elsewhere.py", 9))
    assert moved == tape.eqns[0]  # the source line is not part of equality
    assert Lit(float("nan"), Aval((), F64)) == Lit(float("nan"), Aval((), F64))
    assert Lit(1, Aval((), F64)) != Lit(1.0, Aval((), F64))
    assert Lit(0.0, Aval((), F64)) != Lit(-0.0, Aval((), F64))
