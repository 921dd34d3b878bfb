"""The text form round-trips: `parse_tape(print_tape(t)) == t` for traced tapes (primal and
joint) of random numpy programs, and for hand-built tapes with every kind of literal, constant,
param and name. Every traced tape also typechecks."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tapejit as tj
from tapejit import autodiff
from tapejit.avals import Aval
from tapejit.ir import Eqn, Lit, Tape, Var, make_params, print_eqn, print_tape
from tapejit.parse import parse_tape
from tapejit.typecheck import typecheck

SETTINGS = settings(deadline=None, max_examples=50,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def assert_round_trip(tape: Tape) -> None:
    typecheck(tape)
    for show_src in (True, False):
        text = print_tape(tape, show_src=show_src)
        parsed = parse_tape(text, consts=tape.consts)
        assert parsed == tape, text
        assert print_tape(parsed, show_src=show_src) == text
        typecheck(parsed)


# ---- random numpy programs ----------------------------------------------------------------------
UNARY = [np.exp, np.log, np.sin, np.cos, np.tanh, np.sqrt, np.abs, np.negative, np.square,
         np.expm1, np.log1p, np.floor, np.sign, np.arctan, np.sinh]
BINARY = [np.add, np.subtract, np.multiply, np.divide, np.maximum, np.minimum, np.arctan2,
          np.hypot, np.logaddexp, lambda a, b: a ** 2 + b, lambda a, b: np.where(a > b, a, b)]
REDUCTIONS = [np.sum, np.mean, np.max, np.min, np.prod]
shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)


def _broadcastable(a: tuple, b: tuple) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


@st.composite
def programs(draw):
    """(f, args): a random straight-line numpy program and concrete arguments. Each step is
    chosen against the concrete shapes of the values so far, then replayed on tracers."""
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    args = [np.ones(draw(shapes), dtype) for _ in range(draw(st.integers(1, 3)))]
    steps = []
    vals = list(args)

    def step(fn):
        with np.errstate(all="ignore"):
            vals.append(np.asarray(fn(vals)))
        steps.append(fn)

    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(vals) - 1))
        x = vals[i]
        kind = draw(st.sampled_from(["unary", "binary", "reduce", "layout", "slice", "matmul",
                                     "astype", "setitem"]))
        if kind == "unary":
            fn = draw(st.sampled_from(UNARY))
            step(lambda v, i=i, fn=fn: fn(v[i]))
        elif kind == "binary":
            fn = draw(st.sampled_from(BINARY))
            partners = [j for j, v in enumerate(vals) if _broadcastable(v.shape, x.shape)]
            other = draw(st.sampled_from(partners + ["scalar", "const"]))
            if other == "scalar":
                c = draw(st.sampled_from([2.0, -1.5, 0.5, 3]))
                step(lambda v, i=i, fn=fn, c=c: fn(v[i], c))
            elif other == "const":  # a closed-over array: becomes a constant of the tape
                c = np.linspace(0.5, 1.5, int(np.prod(x.shape[-1:]))).reshape(x.shape[-1:])
                step(lambda v, i=i, fn=fn, c=c: fn(c, v[i]))
            else:
                step(lambda v, i=i, j=other, fn=fn: fn(v[i], v[j]))
        elif kind == "reduce":
            fn = draw(st.sampled_from(REDUCTIONS))
            axis = draw(st.sampled_from([None] + list(range(-x.ndim, x.ndim))
                                        + ([tuple(range(x.ndim))] if x.ndim else [])))
            keepdims = draw(st.booleans())
            step(lambda v, i=i, fn=fn, a=axis, k=keepdims: fn(v[i], axis=a, keepdims=k))
        elif kind == "layout" and x.ndim:
            how = draw(st.sampled_from(["flat", "reverse", "T", "perm", "expand"]))
            perm = tuple(draw(st.permutations(range(x.ndim))))
            step({"flat": lambda v, i=i: v[i].reshape(-1),
                  "reverse": lambda v, i=i: v[i].reshape(v[i].shape[::-1]),
                  "T": lambda v, i=i: v[i].T,
                  "perm": lambda v, i=i, p=perm: np.transpose(v[i], p),
                  "expand": lambda v, i=i: v[i][None, ..., None]}[how])
        elif kind == "slice" and x.ndim:
            n = x.shape[0]
            key = draw(st.sampled_from([slice(1, None), slice(None, None, 2), slice(None, -1),
                                        0, -1, (Ellipsis, 0), slice(None, None, -1)]))
            if n > 1 or key in (0, -1, (Ellipsis, 0), slice(None, None, 2)):
                step(lambda v, i=i, key=key: v[i][key])
        elif kind == "matmul" and x.ndim:
            k = draw(st.integers(1, 3))
            w = np.linspace(-1, 1, x.shape[-1] * k).reshape(x.shape[-1], k).astype(x.dtype)
            step(lambda v, i=i, w=w: v[i] @ w)
        elif kind == "astype":
            to = draw(st.sampled_from([np.float32, np.float64]))
            step(lambda v, i=i, to=to: v[i].astype(to))
        elif kind == "setitem" and x.ndim:
            def setitem(v, i=i):
                y = v[i].copy()
                y[0] = y[-1] * 2.0
                return y
            step(setitem)

    def f(*xs):
        v = list(xs)
        for fn in steps:
            v.append(fn(v))
        return np.sum(v[-1]) + np.sum(v[0])

    return f, args


@SETTINGS
@given(programs())
def test_traced_primal_tapes_round_trip(program):
    f, args = program
    assert_round_trip(tj.make_tape(f)(*args))


@SETTINGS
@given(programs())
def test_traced_joint_tapes_round_trip(program):
    f, args = program
    argnums = tuple(range(len(args)))
    joint = tj.make_tape(tj.grad(f, argnums=argnums))(*args)
    assert joint.reverse_start is not None
    assert "# reverse" in print_tape(joint)
    assert_round_trip(joint)
    # the raw joint tape, before the optimizer, with its ct_ names
    primal = tj.make_tape(f)(*args)
    raw = autodiff.vjp_tape(primal, argnums, [autodiff.ONE])
    assert any(v.name.startswith("ct_") for e in raw.eqns for v in e.outs) or not raw.eqns
    assert_round_trip(raw)


# ---- literals, constants, params, names ----------------------------------------------------------
F64, F32, I64, I32, BOOL = (np.dtype(t) for t in (np.float64, np.float32, np.int64, np.int32,
                                                  np.bool_))


@st.composite
def literals(draw):
    kind = draw(st.sampled_from(["f64", "f32", "i64", "i32", "bool"]))
    if kind == "f64":
        return Lit(draw(st.floats(allow_nan=True, allow_infinity=True)), Aval((), F64))
    if kind == "f32":
        value = draw(st.floats(width=32, allow_nan=True, allow_infinity=True))
        return Lit(float(np.float32(value)), Aval((), F32))
    if kind == "i64":
        return Lit(draw(st.integers(-2**63, 2**63 - 1)), Aval((), I64))
    if kind == "i32":
        return Lit(draw(st.integers(-2**31, 2**31 - 1)), Aval((), I32))
    return Lit(draw(st.booleans()), Aval((), BOOL))


@SETTINGS
@given(st.lists(literals(), min_size=1, max_size=8))
def test_every_kind_of_literal_round_trips(lits):
    """Each literal feeds an `add` with a var of its dtype, and is also an output."""
    invars, eqns = [], []
    for k, lit in enumerate(lits):
        x = Var(f"x{k}", Aval((2,), lit.aval.dtype))
        out = Var(f"v{k + 1}", Aval((2,), lit.aval.dtype))
        op = "or" if lit.aval.dtype == BOOL else "add"
        invars.append(x)
        eqns.append(Eqn(op, (x, lit), (out,), (), ("prog.py", k + 1)))
    tape = Tape(tuple(invars), tuple(eqns), tuple(e.outs[0] for e in eqns) + tuple(lits))
    assert_round_trip(tape)


@pytest.mark.parametrize("value,dtype,text", [
    (float("nan"), F64, "nan:f64[]"), (float("inf"), F64, "inf:f64[]"),
    (float("-inf"), F32, "-inf:f32[]"), (-2.5, F64, "-2.5:f64[]"), (-0.0, F64, "-0.0:f64[]"),
    (float(np.float32(0.1)), F32, "0.10000000149011612:f32[]"), (1e300, F64, "1e+300:f64[]"),
    (-3, I64, "-3:i64[]"), (True, BOOL, "True:bool[]"), (False, BOOL, "False:bool[]"),
])
def test_literal_text(value, dtype, text):
    lit = Lit(value, Aval((), dtype))
    assert str(lit) == text
    x = Var("x", Aval((), dtype))
    op = "and" if dtype == BOOL else "mul"
    tape = Tape((x,), (Eqn(op, (x, lit), (Var("v1", x.aval),), ()),), (Var("v1", x.aval),))
    assert_round_trip(tape)


def test_traced_literals_of_every_kind():
    c = np.arange(4.0)

    def f(x, mask, n, x32):
        a = np.where(mask, x * -2.5 + np.nan, np.maximum(x, -np.inf)) * c
        b = np.logical_and(mask, True)
        return (np.sum(a) + np.sum(n + 3) + np.inf + np.sum(np.where(b, x, -1))
                + np.sum(x32 * 0.1))

    tape = tj.make_tape(f)(np.ones(4), np.array([True, False, True, True]), np.arange(4),
                           np.ones(4, np.float32))
    text = print_tape(tape)
    for lit in ["-2.5:f64[]", "nan:f64[]", "-inf:f64[]", "3:i64[]", "inf:f64[]", "True:bool[]",
                "0.10000000149011612:f32[]"]:
        assert lit in text, lit
    assert tape.constvars and np.array_equal(tape.consts[0], c)
    assert_round_trip(tape)


def test_constants_round_trip_with_their_arrays():
    w = np.array([[1.0, np.nan], [np.inf, -2.0]])
    k = np.array([0, 2, 2])
    tape = tj.make_tape(lambda x: np.sum((x @ w)[k] * np.arange(1.0, 3.0)))(np.ones((3, 2)))
    text = print_tape(tape)
    assert " ; c" in text.splitlines()[0]
    assert_round_trip(tape)
    other = parse_tape(text)  # no consts given: zeros of the constants' avals
    assert other != tape and all(not c.any() for c in other.consts)
    typecheck(other)


def test_params_with_nested_tuples_and_strings():
    x = Var("x", Aval((2, 3), F64))
    y = Var("y", Aval((3, 4), F64))
    eqns = (
        Eqn("dot_general", (x, y), (Var("v1", Aval((2, 4), F64)),),
            make_params({"contract": ((1,), (0,)), "batch": ((), ())})),
        Eqn("convert", (Var("v1", Aval((2, 4), F64)),), (Var("v2", Aval((2, 4), F32)),),
            make_params({"dtype": "f32"})),
        Eqn("pad", (Var("v2", Aval((2, 4), F32)), Lit(0.0, Aval((), F32))),
            (Var("v3", Aval((4, 8), F32)),),
            make_params({"lo": (1, 0), "hi": (1, 1), "interior": (0, 1)})),
    )
    tape = Tape((x, y), eqns, (eqns[-1].outs[0],))
    assert "dot_general[batch=((), ()), contract=((1,), (0,))] x y" in print_tape(tape)
    assert "convert[dtype='f32'] v1" in print_tape(tape)
    assert_round_trip(tape)


def test_user_names_and_cotangent_names():
    def loss(params, x):
        return np.sum(np.tanh(x @ params["w"][0]) * params["b"])

    params = {"w": [np.ones((3, 2))], "b": np.zeros(2)}
    tape = tj.make_tape(tj.grad(loss))(params, np.ones((4, 3)))
    names = [v.name for v in tape.invars]
    assert names == ["params_b", "params_w_0", "x"]     # a dict's keys sorted, as JAX
    assert_round_trip(tape)
    primal = tj.make_tape(loss)(params, np.ones((4, 3)))
    raw = autodiff.vjp_tape(primal, [0, 1], [autodiff.INPUT])
    text = print_tape(raw)
    assert "ct_params_w_0" in text and "ct_params_b" in text and "ct_v" in text
    assert_round_trip(raw)


def test_edge_shapes_of_tapes():
    x = Var("x", Aval((), F64))
    empty = Tape((x,), (), (x,))
    assert print_tape(empty) == "{ lambda x:f64[] .\n  let\n  in ( x ) }"
    assert_round_trip(empty)
    no_inputs = Tape((), (), (Lit(1.5, Aval((), F64)),))
    assert_round_trip(no_inputs)
    for start in (0, 1):  # the reverse sweep starts first, or is empty (marker at the end)
        v = Var("v1", Aval((), F64))
        t = Tape((x,), (Eqn("neg", (x,), (v,), ()),), (v,), reverse_start=start)
        assert print_tape(t).count("# reverse") == 1
        assert_round_trip(t)
    zero_size = Var("z", Aval((0, 3), F32))
    assert_round_trip(Tape((zero_size,), (), (zero_size,)))
    joint = autodiff.vjp_tape(tj.make_tape(lambda a: a)(np.ones(3)), [0], [autodiff.INPUT])
    assert joint.reverse_start == 0 and not joint.eqns
    assert_round_trip(joint)


def test_print_eqn_and_source_comment():
    x = Var("x", Aval((3,), F64))
    eqn = Eqn("exp", (x,), (Var("v1", x.aval),), (), ("/some/dir/model.py", 12))
    assert print_eqn(eqn) == "v1:f64[3] = exp x"
    assert print_eqn(eqn, show_src=True) == "v1:f64[3] = exp x  # model.py:12"
    tape = Tape((x,), (eqn,), (eqn.outs[0],))
    assert parse_tape(print_tape(tape)).eqns[0].src == ("model.py", 12)
    assert parse_tape(print_tape(tape, show_src=False)).eqns[0].src is None
    assert str(tape) == print_tape(tape)
