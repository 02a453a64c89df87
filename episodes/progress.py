"""A rich progress bar (with ETA) over concurrently running coroutines, or over work counted elsewhere."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TypeVar

T = TypeVar("T")


def note(line: str) -> None:
    """Print one line above the progress bars (where they print)."""
    from rich.console import Console

    Console().print(line, highlight=False)


@contextlib.contextmanager
def progress_bar(description: str, total: int, enabled: bool = True) -> Iterator[Callable[..., None]]:
    """A bar of ``total`` steps; yields ``update(completed, description=None)`` (a new description replaces the
    bar's label), a no-op when not ``enabled``."""
    if not enabled or not total:
        yield lambda completed, description=None: None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task_id = bar.add_task(description, total=total)

        def update(completed: int, description: str | None = None) -> None:
            bar.update(task_id, completed=completed, **({"description": description} if description else {}))

        yield update


async def track(coros: Sequence[Awaitable[T]], description: str, enabled: bool = True) -> list[T]:
    """Await all ``coros`` concurrently; results in completion order."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    results: list[T] = []
    try:
        with progress_bar(description, len(tasks), enabled) as update:
            for fut in asyncio.as_completed(tasks):
                results.append(await fut)
                update(len(results))
    except asyncio.CancelledError:  # a cancelled batch (a benchmark stopped over HTTP) stops its episodes too
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return results
