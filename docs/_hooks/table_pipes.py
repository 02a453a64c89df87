"""An mkdocs hook: ``\\|`` in a table row's code span is a ``|``, as GitHub renders it.

GitHub needs the backslash to keep a pipe inside a code span from splitting a table cell; Python-Markdown already
leaves pipes inside code spans alone and would print the backslash.
"""

from __future__ import annotations

import re

_CODE_SPAN = re.compile(r"`[^`\n]*`")


def on_page_markdown(markdown: str, **_: object) -> str:
    lines = markdown.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("|"):
            lines[i] = _CODE_SPAN.sub(lambda span: span.group(0).replace("\\|", "|"), line)
    return "\n".join(lines)
