"""A rich progress bar (with ETA) over concurrently running coroutines."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Sequence
from typing import TypeVar

T = TypeVar("T")


def note(line: str) -> None:
    """Print one line above the progress bars (where they print)."""
    from rich.console import Console

    Console().print(line, highlight=False)


async def track(coros: Sequence[Awaitable[T]], description: str, enabled: bool = True) -> list[T]:
    """Await all ``coros`` concurrently; results in completion order."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    results: list[T] = []
    if not enabled or not tasks:
        for fut in asyncio.as_completed(tasks):
            results.append(await fut)
        return results
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
        task_id = bar.add_task(description, total=len(tasks))
        for fut in asyncio.as_completed(tasks):
            results.append(await fut)
            bar.advance(task_id)
    return results
