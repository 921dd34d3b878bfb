"""The tools wing: programs that use tapejit, shipped beside it; the library never imports
them (tests/test_architecture.py checks).

- `cli`: the command line, `python -m tapejit` or `tapejit` (demo, info, cache, bench,
  selfcheck);
- `demo`: the main job, an MLP trained on scikit-learn's digits;
- `selfcheck`: random numpy programs run compiled, interpreted and on numpy, which must agree;
  its programs come from `program_generator` (the program, its axes and sizes) and
  `statement_templates` (what a line may compute).
"""
