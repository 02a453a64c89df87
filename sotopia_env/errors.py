"""``UserError``: the base of every error a user can cause and fix.

A bad YAML file, an unknown scenario, a store that cannot be reached, a model that
cannot be found: each is raised as a subclass of ``UserError`` with a one-line
message that says what and where. The CLI prints that line and exits 1; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


class UserError(Exception):
    """An error the user can fix; its message is one line naming what and where."""


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its class name when the message is blank."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def did_you_mean(word: str, choices: Iterable[str], listing: str | None = None) -> str:
    """The tail of a one-line error about an unknown ``word``: the close matches among ``choices``
    (``difflib.get_close_matches``) and the command that lists them, e.g.
    ``"; did you mean 'rule-based'? (sotopia-env scenarios list lists them)"``; ``""`` when there is neither."""
    import difflib

    pool = sorted({c for c in choices if c})
    lowered = {c.lower(): c for c in pool}
    close = [lowered[m] for m in difflib.get_close_matches(word.strip().lower(), list(lowered), n=3, cutoff=0.6)]
    tail = ""
    if close:
        tail = "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    if listing:
        tail += f" ({listing})" if tail else f"; {listing}"
    return tail
