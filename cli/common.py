"""Shared CLI helpers: the console and turning user errors into one-line messages."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print a one-line error and return the Exit to raise. ``message`` is shown as it is: brackets in it (a
    pip extra, a list) are text, not Rich markup."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, markup=True, soft_wrap=True)
    return typer.Exit(code)


@contextlib.contextmanager
def user_errors(*types: type[BaseException]) -> Iterator[None]:
    """Turn the given exception types (ValueError and OSError by default) into a one-line error."""
    caught: tuple[type[BaseException], ...] = types or (ValueError, OSError)
    try:
        yield
    except caught as exc:
        raise fail(str(exc)) from None


@contextlib.contextmanager
def needs_extra(extra: str, *modules: str) -> Iterator[None]:
    """Turn a missing optional dependency (one of ``modules``) into the one line that installs ``extra``."""
    try:
        yield
    except ModuleNotFoundError as exc:
        top = (exc.name or "").split(".")[0]
        if top not in modules:
            raise
        install = f"pip install 'sotopia-env[{extra}]'"
        raise fail(f"this command needs the '{extra}' extra ({top} is missing): {install}") from None


def check_output_file(path: Path | None, option: str) -> None:
    """Fail now (one line, before any work) where ``path`` could not be written as a file later."""
    if path is None:
        return
    if path.is_dir():
        raise fail(f"{option} {path}: is a folder; give a file path")
    if not path.absolute().parent.is_dir():
        raise fail(f"{option} {path}: the folder {path.absolute().parent} does not exist")
