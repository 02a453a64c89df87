"""The code blocks of the README and of the documentation pages under ``docs/``, as the docs test and ``.ci/run``
read them (the standard library only: ``.ci/run`` runs this file with the system's ``python3``).

``setup_commands()`` gives the two commands at the top of the README (set up and run an episode; run the tests);
``page_blocks(path)`` every fenced block of a page, with its language, its line and, when the line just above its
fence is ``<!-- not run: REASON -->``, why the docs test does not run it; ``blocks(section)`` the fenced blocks under
the one heading named ``section`` on any page, down to the next heading of the same or a higher level.
``python3 tests/readme_blocks.py N`` prints the Nth setup command; ``... python-api`` the Python API code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
_HEADING = re.compile(r"^(#{1,6}) (.+?)\s*$")
_NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")


@dataclass(frozen=True)
class Block:
    page: str  # the page's path from the repository root
    line: int  # the line of the opening fence, from 1
    lang: str
    body: str
    not_run: str | None  # why the docs test does not run it; None: it runs


@dataclass(frozen=True)
class _Page:
    blocks: list[Block]
    headings: list[tuple[int, int, str]]  # (line, level, title), outside code blocks


def pages() -> list[Path]:
    """The README, then every page of the site by name."""
    return [README, *sorted(DOCS.glob("*.md"))]


def strip_comment(line: str) -> str:
    """A shell line without its trailing ``# comment`` (the docs' commands quote no '#')."""
    return re.sub(r"\s+#.*$", "", line).strip()


def setup_commands(text: str | None = None) -> list[str]:
    """The shell commands of the README's first code block, comments removed."""
    text = text if text is not None else README.read_text()
    _, body = _FENCE.search(text).groups()
    return [strip_comment(line) for line in body.splitlines() if strip_comment(line)]


def _parse(text: str, page: str) -> _Page:
    lines = text.splitlines()
    blocks: list[Block] = []
    headings: list[tuple[int, int, str]] = []
    pending: tuple[int, str] | None = None  # a not-run marker waiting for its block
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            if end is None:
                raise ValueError(f"{page}:{i + 1}: a code block that is never closed")
            reason = pending[1] if pending else None
            body = "\n".join(lines[i + 1 : end]) + "\n"
            blocks.append(Block(page, i + 1, line[3:].strip(), body, reason))
            pending, i = None, end + 1
            continue
        if pending and line.strip():
            raise ValueError(f"{page}:{pending[0]}: '<!-- not run: ... -->' must stand just above a code block")
        if marker := _NOT_RUN.match(line):
            pending = (i + 1, marker.group(1).strip())
        elif heading := _HEADING.match(line):
            headings.append((i + 1, len(heading.group(1)), heading.group(2)))
        i += 1
    if pending:
        raise ValueError(f"{page}:{pending[0]}: '<!-- not run: ... -->' must stand just above a code block")
    return _Page(blocks, headings)


def page_blocks(path: Path) -> list[Block]:
    """Every fenced block of one page, in order."""
    return _parse(path.read_text(), _name(path)).blocks


def blocks(section: str, text: str | None = None) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block under the heading ``section`` (of any level), on whichever page
    holds it (or in ``text``), down to the next heading of the same or a higher level."""
    sources = [("text", text)] if text is not None else [(_name(path), path.read_text()) for path in pages()]
    found = []
    for name, source in sources:
        page = _parse(source, name)
        for n, (line, level, title) in enumerate(page.headings):
            if title == section:
                after = [other for other, other_level, _ in page.headings[n + 1 :] if other_level <= level]
                end = after[0] if after else float("inf")
                found.append([(b.lang, b.body) for b in page.blocks if line < b.line < end])
    if len(found) != 1:
        where = "no" if not found else f"{len(found)}"
        raise KeyError(f"README.md and docs/ have {where} heading '{section}' (one expected)")
    return found[0]


def _name(path: Path) -> str:
    return path.resolve().relative_to(ROOT).as_posix()


if __name__ == "__main__":
    import sys

    if sys.argv[1] == "python-api":  # the Python API page's code, for the wheel check in .ci/run
        print("\n".join(body for lang, body in blocks("Python API") if lang == "python"))
    else:
        print(setup_commands()[int(sys.argv[1]) - 1])
