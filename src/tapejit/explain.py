"""`tj.explain`: what the compiler does with a function, printed.

    ex = tj.explain(loss)(w, x, y)     # the gradient program of loss w.r.t. argument 0
    print(ex)                          # every stage below, as text
    ex.tapes["traced"], ex.tapes["autodiff"], ex.tapes["cse"], ex.tape   # Tape per stage
    ex.groups                          # codegen/schedule.py's steps: Loop and Call
    ex.source, ex.sizes                # the numba module and the size table `S` it is called with

Stages, in pipeline order: "traced" (the primal tape, as `tj.make_tape` shows it), "rerolled"
(its plain Python loops as scans; only when one was re-rolled), "autodiff"
(the joint tape; absent with grad=False), then one tape after each pass of `passes.PIPELINE`,
named by the pass; then the fusion groups and the generated source of the last tape.

This module is a consumer, not a second pipeline: the program is built by the builders the
transforms use (programs.py `gradient_program`, `forward_program`), which report each stage,
and shown as an `Explanation` (explanation.py). It never compiles: the source is shown, not
loaded. In the layers: above the transforms (it reads a transform's own settings and counts).
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from .arguments import fn_name, normalize_argnums, split_args
from .compile import BACKENDS
from .dispatch import CachedTransform
from .draws import collecting
from .errors import ArgumentError, at_source, user_source
from .explanation import Explanation, build
from .ir import Tape
from .programs import collecting_rerolls, forward_program, gradient_program
from .pytree import TreeDef


def explain(fn: Callable[..., Any], argnums: int | Sequence[int] = 0, *, grad: bool = True,
            has_aux: bool = False, static_argnums: int | Sequence[int] = (),
            backend: str = "numba") -> Callable[..., Explanation]:
    """`explain(f)(*args)`: the stages of the program `value_and_grad(f, argnums)` runs on
    `args` (with grad=False: of `f` itself). Nothing is compiled or run.

    `fn` may also be a transform (`tj.grad(f)`, `tj.value_and_grad(f)`): its own argnums,
    has_aux and static_argnums are used, and its `cache_info()` (counts, and why its last call
    missed the cache) is shown; `tj.jit(f)` shows its forward program. Other transforms
    (vmap, jacobian, ...) are refused: explain the function they transform. backend="interpret" shows the tapes only: that backend has no
    fusion or generated code.
    """
    if backend not in BACKENDS:
        raise ArgumentError(at_source(f"unknown backend {backend!r}; choose one of "
                                      f"{', '.join(BACKENDS)}", user_source()))
    fn, nums_given, has_aux, static, transform = _settings(fn, argnums if grad else None,
                                                           has_aux, static_argnums)

    def explained(*args: Any, **kwargs: Any) -> Explanation:
        call, _ = split_args(fn, args, kwargs, static)
        tapes: dict[str, Tape] = {}
        what = "forward program"
        builder = transform or f"explain({fn_name(fn)})"     # draws recorded as grad's
        with collecting_rerolls() as loops, collecting(builder):
            if nums_given is None:
                forward_program(fn, call, has_aux, stages=tapes.__setitem__)
            else:
                nums = normalize_argnums(nums_given, call.n_pos)
                gradient_program(fn, call, nums, has_aux, what="explain",
                                 check_output=_require_scalar_float, stages=tapes.__setitem__)
                what = f"gradient program w.r.t. argument(s) {', '.join(map(str, nums))}"
        notes = [f"re-rolled into a scan: the Python {loop}" for loop in loops]
        if transform is not None:
            notes.append("cache of the transform: " + ", ".join(
                f"{k}={v}" for k, v in transform.cache_info().items()))
        return build(f"{fn_name(fn)}, {what}, backend {backend}", tapes, backend, notes)

    return explained


EXPLAINED = ("grad", "value_and_grad", "jit")   # the transforms whose programs explain builds


def _settings(fn: Callable[..., Any], argnums: int | Sequence[int] | None, has_aux: bool,
              static_argnums: int | Sequence[int]) -> tuple:
    """(function, argnums or None for the forward program, has_aux, static argnums as a tuple,
    the transform or None): a transform's own settings replace the arguments."""
    transform = getattr(fn, "__wrapped_transform__", fn)
    if isinstance(transform, CachedTransform) and transform.transform not in EXPLAINED:
        raise ArgumentError(at_source(
            f"explain shows the programs of plain functions and of {', '.join(EXPLAINED)}; "
            f"{transform.label()} builds a program of its own. Explain the function it "
            f"transforms instead (tj.explain({fn_name(transform.fn)}), grad=False for its "
            f"forward program)", user_source()))
    if isinstance(transform, CachedTransform):
        fn, static_argnums = transform.fn, transform.static_argnums
        argnums = getattr(transform, "argnums", None)
        has_aux = getattr(transform, "has_aux", False)
    else:
        transform = None
    static = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    return fn, argnums, has_aux, static, transform


def _require_scalar_float(fn: Callable[..., Any], tape: Tape, out_td: TreeDef) -> None:
    """explain's `OutputCheck` (programs.py): its message points to grad=False."""
    n_out = out_td.num_leaves
    out = tape.outvars[0] if n_out == 1 else None
    if out is None or out.aval.shape != () or not out.aval.is_float:
        shown = out.aval if out is not None else f"{n_out} outputs"
        raise ArgumentError(at_source(
            f"explain shows the gradient program, which needs a scalar float output, but "
            f"{fn_name(fn)} returned {shown}; pass grad=False to see the forward program",
            user_source()))
