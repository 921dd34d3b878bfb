"""The ulp table of tapejit's vectorisable math kernels (codegen/vmath.py): for each function
and dtype, the largest error over tests/test_vmath.py's sample of its domain, in ulp of the
exact result (long double reference; float64 for float32), next to numpy's own error on the
same points.

    .venv/bin/python bench/vmath_ulp.py
"""
from __future__ import annotations

import importlib.util
from pathlib import Path


def main() -> None:
    path = Path(__file__).resolve().parent.parent / "tests" / "test_vmath.py"
    spec = importlib.util.spec_from_file_location("test_vmath", path)
    assert spec is not None and spec.loader is not None
    sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sweep)
    print("| function | dtype | tapejit (ulp) | numpy (ulp) | points |")
    print("|---|---|---|---|---|")
    for name, dtype, mine, theirs, points in sweep.ulp_table():
        print(f"| {name} | {dtype} | {mine:.3f} | {theirs:.3f} | {points:,} |")


if __name__ == "__main__":
    main()
