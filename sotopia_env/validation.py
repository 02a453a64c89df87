"""One line for a pydantic ``ValidationError``: which field, and what is wrong with it."""

from __future__ import annotations

from pydantic import ValidationError


def field_problem(exc: ValidationError, whole: str = "(entry)", count_more: bool = False, prefix: str = "") -> str:
    """``field 'a.b': <message>`` for the first error; ``whole`` stands for the field when the error is about
    the whole value, ``prefix`` (e.g. ``rl.``) goes before the field's path, and ``count_more`` appends
    `` (+N more)`` when there are other errors."""
    first = exc.errors()[0]
    path = ".".join(str(p) for p in first["loc"])
    where = prefix + path if path else prefix.rstrip(".") or whole
    more = f" (+{exc.error_count() - 1} more)" if count_more and exc.error_count() > 1 else ""
    message = first["msg"].removeprefix("Value error, ")  # a validator's own ValueError says what is wrong
    return f"field '{where}': {message}{more}"
