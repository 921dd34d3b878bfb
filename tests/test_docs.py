"""The documents run: every ```python snippet of README.md and docs/*.md, and what it prints.

The convention (tests/doc_snippets.py finds and runs the snippets):

- A ```python block is a snippet. The snippets of one file run in order, in one namespace, in
  a fresh process of their own with a new empty TAPEJIT_CACHE_DIR and no other TAPEJIT_*
  variable set: what a newcomer gets who pastes them into a session (the test suite's settings
  in conftest.py do not reach them). A later snippet may use the names an earlier one made.
- A ```text block right after a snippet (only blank lines between) is its expected stdout,
  compared line by line (trailing spaces and blank lines aside). A snippet with no ```text
  block must print nothing. A ```text block that follows no snippet, and a bare ``` block
  right after a snippet, fail the test: both would be output that nothing checks.
- Snippets are compiled under the document's path in the repository with its line numbers:
  tracebacks, error messages (`at docs/api.md:539`) and the `# file:line` comments of
  printed tapes (`# api.md:137`) name the document's lines.
- `...` in expected output stands for any text within one line. Keep it for output that
  cannot be made stable; prefer printing stable things (counts from `cache_info()`, shapes,
  rounded values) to timings, addresses, cache paths and hashes.
- An error is shown by a snippet that catches it and prints its message.
- `<!-- no-run: reason -->` on the line right above a ```python fence exempts that snippet
  (one that needs a GPU, say). At most MAX_NO_RUN snippets are exempt in all.
- Blocks with another info string (bare ```, ```bash, ```sh) are not run: shell commands,
  grammars, signatures.

One test per document: a failure names the document, the snippet's line and shows the diff
between the ```text block and what the snippet printed (or the snippet's traceback).
"""
from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

import doc_table
from doc_snippets import matches, normalize, parse, session

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_NO_RUN = 1     # docs/cuda.md's first snippet needs an NVIDIA GPU


def name(doc: Path) -> str:
    return str(doc.relative_to(ROOT))


@pytest.mark.parametrize("doc", DOCS, ids=name)
def test_doc_snippets_run_and_print_what_the_doc_shows(doc: Path, tmp_path: Path) -> None:
    snippets, problems = parse(doc)
    assert not problems, f"{name(doc)}: " + f"\n{name(doc)}: ".join(problems)
    runnable = [s for s in snippets if s.no_run is None]
    if not runnable:
        return
    try:
        records = session(doc, tmp_path)
    except RuntimeError as err:
        pytest.fail(f"{name(doc)}: {err}")
    failures = []
    for snippet, record in zip(runnable, records):
        where = f"{name(doc)}:{snippet.line}"
        if record["error"] is not None:
            failures.append(f"{where}: the snippet raised\n{record['error']}")
            break
        expected = snippet.expected if snippet.expected is not None else ""
        if not matches(expected, record["stdout"]):
            shown = (f"{name(doc)}:{snippet.expected_line} (the ```text block)"
                     if snippet.expected is not None else "(no ```text block: no output)")
            diff = "\n".join(difflib.unified_diff(
                normalize(expected), normalize(record["stdout"]), fromfile=shown,
                tofile=f"what the snippet at {where} printed", lineterm=""))
            failures.append(f"{where}: the output differs from the document\n{diff}")
    assert not failures, "\n\n".join(failures)


def test_few_snippets_are_exempt() -> None:
    exempt = [f"{name(doc)}:{s.line}: {s.no_run}" for doc in DOCS for s in parse(doc)[0]
              if s.no_run is not None]
    assert len(exempt) <= MAX_NO_RUN, (
        f"{len(exempt)} snippets are marked no-run, at most {MAX_NO_RUN} may be:\n"
        + "\n".join(exempt))


def test_mkdocs_lists_every_page() -> None:
    nav = set(re.findall(r"^\s*-\s*[^:\n]+:\s*(\S+\.md)\s*$",
                         (ROOT / "mkdocs.yml").read_text(), re.MULTILINE))
    pages = {doc.name for doc in DOCS if doc.parent.name == "docs"}
    assert nav == pages, f"mkdocs.yml's nav misses {sorted(pages - nav)}, " \
                         f"lists missing pages {sorted(nav - pages)}"


# a file name in prose: `codegen/cpu.py`, `bench/RESULTS.md`, `../examples/x.py`, `store.py`
FILE_NAME = re.compile(r"(?<![\w./-])((?:[\w.-]+/)*[\w-]+\.(?:py|md))\b")
NOT_OURS = ("file.py", "numba/")     # a placeholder in examples; paths inside numba's package


def _missing_files(text: str, tracked: list[str]) -> list[tuple[int, str]]:
    """(line, name) of each file named in `text` that is none of `tracked`'s (a bare name: that
    no file of `tracked` has; a path: that no path of `tracked` ends with)."""
    names = {Path(t).name for t in tracked}
    found = []
    for m in FILE_NAME.finditer(text):
        ref = m.group(1)
        path = ref.lstrip("./") if ref.startswith("../") else ref
        while path.startswith("../"):
            path = path[3:]
        known = (any(t == path or t.endswith("/" + path) for t in tracked) if "/" in path
                 else path in names)
        if not known and not ref.startswith(NOT_OURS):
            found.append((text.count("\n", 0, m.start()) + 1, ref))
    return found


def test_files_named_in_prose_exist() -> None:
    """README.md, docs/*.md and the library's sources name only files of the repository."""
    tracked = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*.*")
               if not any(part.startswith(".") or part == "__pycache__"
                          for part in p.relative_to(ROOT).parts)]
    sources = sorted((ROOT / "src").rglob("*.py"))
    missing = [f"{name(doc)}:{line}: {ref}" for doc in DOCS + sources
               for line, ref in _missing_files(doc.read_text(), tracked)]
    assert not missing, "files named that the tree does not have:\n" + "\n".join(missing)
    assert _missing_files("see codegen/gone.py and `cpu.py`, not ../bench/x.md", ["a/cpu.py"]) \
        == [(1, "codegen/gone.py"), (1, "../bench/x.md")]


def test_ir_md_names_every_primitive() -> None:
    """docs/ir.md's "The primitives" section names every op of the op table."""
    from tapejit.ops import OPS
    text = (ROOT / "docs" / "ir.md").read_text()
    section = text[text.index("## The primitives"):text.index("## The text form")]
    named = {word for code in re.findall(r"`([^`]+)`", section)
             for word in re.findall(r"[a-z_0-9]+", code)}
    assert not set(OPS) - named, f"docs/ir.md does not name {sorted(set(OPS) - named)}"


def test_api_md_lists_every_supported_name() -> None:
    """docs/api.md's table of supported numpy/scipy names is the op table's `covers=`."""
    api = ROOT / "docs" / "api.md"
    documented, made = doc_table.current(api), doc_table.table()
    diff = "\n".join(difflib.unified_diff(documented, made, "docs/api.md", "tests/op_db.py",
                                          lineterm=""))
    assert documented == made, (f"docs/api.md's supported names differ from tests/op_db.py's "
                                f"rows; run `python tests/doc_table.py --update docs/api.md`:\n"
                                f"{diff}")


def test_expected_output_matching() -> None:
    """The one loose pattern: `...` is any text within one line."""
    assert matches("a ... b\nc", "a 1.23 s b\nc\n\n")
    assert not matches("a ... b", "a 1\n2 b")
    assert not matches("a b", "a b\nc")
    assert matches("fused[body=...] x", "fused[body=...] x")
