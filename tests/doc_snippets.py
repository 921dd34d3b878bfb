"""Find the snippets of a Markdown file and run them as one Python session (tests/test_docs.py).

The convention (also stated at the top of tests/test_docs.py, which checks it):

- A fenced block opened with ```python is a snippet. The snippets of one file run in order, in
  one namespace, in one fresh process: a later snippet uses the names an earlier one made.
- A ```text block right after a snippet (nothing but blank lines between) is the snippet's
  expected stdout. A snippet without one must print nothing. A ```text block anywhere else,
  or a bare ``` block right after a snippet, is an error: output that nothing checks.
- Each snippet is compiled under the Markdown file's path in the repository (`docs/api.md`)
  with the file's own line numbers, so tracebacks, error messages (`at docs/api.md:539`) and
  a printed tape's `# file:line` comments (the base name: `# api.md:137`) name the document's
  lines.
- In expected output, `...` stands for any text within one line (nothing else is loose).
- `<!-- no-run: why -->` on the line right above a ```python fence exempts that snippet; the
  reason is required. tests/test_docs.py keeps the number of exemptions small.
- Other blocks (bare ```, ```bash, ```sh, ...) are not run: shell commands, grammars, signatures.

`session(doc, workdir)` runs a document's snippets the way the test does, in a child process
(`python tests/doc_snippets.py --child DOC.md OUT.json`), and returns one record per snippet:
its line, its stdout, and the traceback of the exception that stopped the session, if one did
(later snippets are then not run).

After a change that moves lines or changes output, `python tests/doc_snippets.py --update
README.md docs/api.md ...` rewrites each snippet's ```text block with what it prints now (adding
one where a snippet prints and has none), as golden files are updated: review the diff.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import linecache
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
import types
from pathlib import Path
from hang import HANG_S

ROOT = Path(__file__).resolve().parent.parent
FENCE = "```"
NO_RUN = re.compile(r"^<!--\s*no-run:\s*(?P<why>\S.*?)\s*-->\s*$")
WILDCARD = "..."


@dataclasses.dataclass(frozen=True)
class Snippet:
    line: int               # the line of the ```python fence (the code starts on the next)
    code: str
    expected: str | None    # the ```text block after it, or None: it must print nothing
    expected_line: int | None
    no_run: str | None      # the reason given in `<!-- no-run: ... -->`, or None


@dataclasses.dataclass(frozen=True)
class Block:
    line: int               # the line of the opening fence, 1-based
    info: str               # the info string: "python", "text", "" ...
    body: str
    end: int                # the line of the closing fence


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, in order (fences start at column 0)."""
    out, lines, k = [], text.splitlines(), 0
    while k < len(lines):
        if not lines[k].startswith(FENCE):
            k += 1
            continue
        start, info = k, lines[k][len(FENCE):].strip()
        k += 1
        while k < len(lines) and lines[k].rstrip() != FENCE:
            k += 1
        if k == len(lines):
            raise ValueError(f"line {start + 1}: a ``` block is never closed")
        body = "".join(line + "\n" for line in lines[start + 1:k])
        out.append(Block(start + 1, info, body, k + 1))
        k += 1
    return out


def parse(path: Path) -> tuple[list[Snippet], list[str]]:
    """The snippets of a Markdown file, and the places that break the convention."""
    text = path.read_text()
    lines = text.splitlines()
    found = blocks(text)
    snippets, problems = [], []
    for k, block in enumerate(found):
        after = found[k + 1] if k + 1 < len(found) else None
        adjacent = after is not None and all(not line.strip()
                                             for line in lines[block.end:after.line - 1])
        if block.info == "text":
            before = found[k - 1] if k else None
            if before is None or before.info != "python" or any(
                    line.strip() for line in lines[before.end:block.line - 1]):
                problems.append(f"line {block.line}: a ```text block that does not follow a "
                                f"```python block (use a bare ``` block for other text)")
            continue
        if block.info != "python":
            continue
        marker = NO_RUN.match(lines[block.line - 2]) if block.line >= 2 else None
        if block.line >= 2 and "no-run" in lines[block.line - 2] and marker is None:
            problems.append(f"line {block.line - 1}: write `<!-- no-run: <reason> -->`")
        expected = expected_line = None
        if adjacent and after.info == "text":
            expected, expected_line = after.body, after.line
        elif adjacent and after.info == "":
            problems.append(f"line {after.line}: a bare ``` block right after the snippet at "
                            f"line {block.line}: if it is the snippet's output, make it ```text")
        snippets.append(Snippet(block.line, block.body, expected, expected_line,
                                marker["why"] if marker else None))
    return snippets, problems


def matches(expected: str, actual: str) -> bool:
    """Whether `actual` is the `expected` output, `...` standing for any text within a line.
    Trailing spaces and trailing blank lines do not count."""
    want, got = normalize(expected), normalize(actual)
    if len(want) != len(got):
        return False
    for w, g in zip(want, got):
        if WILDCARD not in w:
            if w != g:
                return False
        elif not re.fullmatch(".*?".join(map(re.escape, w.split(WILDCARD))), g):
            return False
    return True


def normalize(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def run(path: Path) -> list[dict]:
    """Run the snippets of `path` in order in one module namespace; one record per snippet.
    The code is compiled under the path relative to the repository (`docs/api.md`), whose text
    `linecache` holds, so tracebacks and `inspect.getsource` find the lines wherever this runs."""
    snippets, _ = parse(path)
    name = path.relative_to(ROOT).as_posix()
    text = path.read_text()
    linecache.cache[name] = (len(text), None, text.splitlines(keepends=True), name)
    module = types.ModuleType("doc_" + re.sub(r"\W", "_", path.stem))
    module.__file__ = name
    sys.modules[module.__name__] = module
    records = []
    for snippet in snippets:
        if snippet.no_run is not None:
            continue
        out, error, start = io.StringIO(), None, time.perf_counter()
        try:
            # blank lines first, so the code keeps the document's line numbers
            code = compile("\n" * snippet.line + snippet.code, name, "exec")
            with contextlib.redirect_stdout(out):
                exec(code, module.__dict__)
        except BaseException:  # noqa: BLE001 -- reported in the test, with the document's line
            error = traceback.format_exc()
        records.append({"line": snippet.line, "stdout": out.getvalue(), "error": error,
                        "seconds": round(time.perf_counter() - start, 3)})
        if error is not None:
            break
    return records


def session(doc: Path, workdir: Path) -> list[dict]:
    """Run `doc`'s snippets in a fresh process: its own empty TAPEJIT_CACHE_DIR, no other
    TAPEJIT_* variable (the test suite's settings do not reach it), `workdir` as its cwd."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAPEJIT_")}
    env["TAPEJIT_CACHE_DIR"] = str(workdir / "cache")
    result = workdir / "result.json"
    proc = subprocess.run([sys.executable, __file__, "--child", str(doc), str(result)],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=HANG_S)
    if proc.returncode != 0 or not result.exists():
        raise RuntimeError(f"the snippet runner failed (exit {proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    return json.loads(result.read_text())


def update(doc: Path) -> bool:
    """Rewrite `doc`'s ```text blocks with what its snippets print; whether anything changed."""
    with tempfile.TemporaryDirectory() as tmp:
        records = {r["line"]: r for r in session(doc, Path(tmp))}
    lines = doc.read_text().splitlines()
    snippets, _ = parse(doc)
    for snippet in reversed(snippets):          # from the end: earlier line numbers hold
        record = records.get(snippet.line)
        if record is None or record["error"] is not None or (
                snippet.expected is not None and matches(snippet.expected, record["stdout"])):
            continue                            # (a block that matches keeps its `...`)
        printed = normalize(record["stdout"])
        after = snippet.line + len(snippet.code.splitlines()) + 1   # index after the fence
        block = ["```text", *printed, FENCE] if printed else []
        if snippet.expected is not None:
            stop = snippet.expected_line + len(snippet.expected.splitlines()) + 1
            lines[after:stop] = block
        else:
            lines[after:after] = block
    text = "\n".join(lines) + "\n"
    changed = text != doc.read_text()
    doc.write_text(text)
    return changed


if __name__ == "__main__":
    if sys.argv[1] == "--child":
        doc, result = Path(sys.argv[2]).resolve(), Path(sys.argv[3])
        result.write_text(json.dumps(run(doc), indent=1))
    elif sys.argv[1] == "--update":
        for name in sys.argv[2:]:
            for _ in range(3):                  # again while lines move (tapes print them)
                if not update(Path(name).resolve()):
                    break
            print(name, "updated")
