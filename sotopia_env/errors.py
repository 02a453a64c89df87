"""``UserError``: the base of every error a user can cause and fix.

A bad YAML file, an unknown scenario, a store that cannot be reached, a model that
cannot be found: each is raised as a subclass of ``UserError`` with a one-line
message that says what and where. The CLI prints that line and exits 1; anything
else is a bug and keeps its traceback.
"""

from __future__ import annotations


class UserError(Exception):
    """An error the user can fix; its message is one line naming what and where."""


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its class name when the message is blank."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
