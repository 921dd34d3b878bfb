"""Golden IR: the printed tape (with source lines) of each program in golden_programs.py at each
stage, compared with tests/golden/<program>.<stage>.txt. A mismatch fails with a diff; review it
like code. Regenerate with `TAPEJIT_UPDATE_GOLDENS=1 pytest tests/test_golden.py`."""
from __future__ import annotations

import difflib
import os
import pathlib

import pytest

import golden_programs as G
from tapejit.ir import print_tape
from tapejit.parse import parse_tape
from tapejit.typecheck import typecheck

GOLDEN_DIR = pathlib.Path(__file__).parent / "golden"
UPDATE = os.environ.get("TAPEJIT_UPDATE_GOLDENS") == "1"


@pytest.mark.parametrize("which", G.STAGES)
@pytest.mark.parametrize("name", sorted(G.PROGRAMS))
def test_golden(name, which):
    tape = G.stage(name, which)
    typecheck(tape)
    text = print_tape(tape) + "\n"
    assert parse_tape(text, consts=tape.consts) == tape
    path = GOLDEN_DIR / f"{name}.{which}.txt"
    if UPDATE:
        GOLDEN_DIR.mkdir(exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"{path} is missing; run TAPEJIT_UPDATE_GOLDENS=1 pytest {__file__}")
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/{path.name}", "printed now"))
        pytest.fail(f"the printed IR of {name} ({which}) changed:\n{diff}\nIf the change is "
                    f"intended, regenerate with TAPEJIT_UPDATE_GOLDENS=1 and review the diff.",
                    pytrace=False)


def test_every_golden_file_has_a_test():
    expected = {f"{n}.{w}.txt" for n in G.PROGRAMS for w in G.STAGES}
    assert {p.name for p in GOLDEN_DIR.glob("*.txt")} <= expected
