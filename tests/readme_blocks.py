"""The README's code blocks, as the README test and ``.ci/run`` read them.

``setup_commands()`` gives the two commands at the top of the README (set up and run an episode; run the tests);
``blocks(section)`` gives the fenced blocks under a ``## section`` heading, with their language.
``python3 tests/readme_blocks.py N`` prints the Nth setup command; ``... python-api`` the Python API code.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def strip_comment(line: str) -> str:
    """A shell line without its trailing ``# comment`` (the README's commands quote no '#')."""
    return re.sub(r"\s+#.*$", "", line).strip()


def setup_commands(text: str | None = None) -> list[str]:
    """The shell commands of the README's first code block, comments removed."""
    text = text if text is not None else README.read_text()
    _, body = _FENCE.search(text).groups()
    return [strip_comment(line) for line in body.splitlines() if strip_comment(line)]


def blocks(section: str, text: str | None = None) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced block under the ``## section`` heading, up to the next ``## ``."""
    text = text if text is not None else README.read_text()
    match = re.search(rf"^## {re.escape(section)}\s*$(.*?)(?=^## |\Z)", text, re.S | re.M)
    if match is None:
        raise KeyError(f"README.md has no '## {section}' section")
    return [(lang, body) for lang, body in _FENCE.findall(match.group(1))]


if __name__ == "__main__":
    import sys

    if sys.argv[1] == "python-api":  # the Python API section's code, for the wheel check in .ci/run
        print("\n".join(body for lang, body in blocks("Python API") if lang == "python"))
    else:
        print(setup_commands()[int(sys.argv[1]) - 1])
