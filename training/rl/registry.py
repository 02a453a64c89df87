"""The task registry: ``RLTask``, ``TaskError``, ``TASKS`` and ``@register_task`` (``training.rl.tasks`` builds tasks
by name).

``TASKS`` is a ``sotopia_env.registry.Registry`` of task builders: ``@register_task("name")`` (or
``TASKS.register("name", builder)``) adds one, and an installed package adds its own through the entry-point group
``sotopia_env.rl_tasks`` (``my-task = my_package.tasks:build_my_task``), loaded on the first lookup. A name taken
by another builder is a one-line ``TaskError``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sotopia_env.errors import UserError
from sotopia_env.registry import Registry

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


ENTRY_POINT_GROUP = "sotopia_env.rl_tasks"


def _check_builder(builder: Any, where: str) -> TaskBuilder:
    if not callable(builder):
        raise TaskError(f"{where}: {builder!r} is not a task builder ((data, max_items, **options) -> RLTask)")
    return builder


TASKS: Registry[TaskBuilder] = Registry("RL task", ENTRY_POINT_GROUP, error=TaskError, check=_check_builder)
_TASKS = TASKS  # the name it had when it was a dict (a read-only mapping still)


def register_task(name: str, replace: bool = False) -> Callable[[TaskBuilder], TaskBuilder]:
    """Decorator: register ``builder(data, max_items, **options) -> RLTask`` under ``name``; a name taken by another
    builder is a ``TaskError`` unless ``replace``."""
    return TASKS.register(name, replace=replace)
