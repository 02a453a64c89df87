"""The task registry: ``RLTask``, ``TaskError`` and ``@register_task`` (``training.rl.tasks`` builds tasks by name)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sotopia_env.errors import UserError

RewardFunc = Callable[..., list[float | None]]
TaskBuilder = Callable[..., "RLTask"]  # (data, max_items, **options) -> RLTask


class TaskError(UserError, ValueError):
    """A task that cannot be built: an unknown name, a missing or malformed data file (named, with the line)."""


@dataclass(frozen=True)
class RLTask:
    name: str
    dataset: Any  # datasets.Dataset: a chat-form "prompt" column plus the columns the rewards need
    rewards: list[RewardFunc]

    def __post_init__(self) -> None:
        if len(self.dataset) == 0:
            raise TaskError(f"task {self.name!r}: its dataset is empty (no items in the data file?)")
        if "prompt" not in self.dataset.column_names:
            raise TaskError(f"task {self.name!r}: its dataset has no 'prompt' column")
        if not self.rewards:
            raise TaskError(f"task {self.name!r}: no reward functions")


_TASKS: dict[str, TaskBuilder] = {}


def register_task(name: str) -> Callable[[TaskBuilder], TaskBuilder]:
    """Decorator: register ``builder(data, max_items, **options) -> RLTask`` under ``name`` (a later one replaces
    it)."""

    def register(builder: TaskBuilder) -> TaskBuilder:
        _TASKS[name] = builder
        return builder

    return register
