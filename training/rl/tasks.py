"""What GRPO trains on: a task is a prompt dataset and reward functions, registered by name.

A task builder takes the task's data file (or None), an item limit and the task's options (keyword
arguments, from ``task_options`` in the config) and returns an :class:`RLTask`:

- ``dataset``: a ``datasets.Dataset`` with a ``prompt`` column in chat form (a list of
  ``{"role", "content"}`` messages) and whatever other columns the rewards read;
- ``rewards``: reward functions in TRL's form ``(prompts, completions, **columns) -> list[float | None]``.
  TRL passes every dataset column (one value per completion) as a keyword argument. A reward that
  cannot be computed for a completion is ``None``, never 0: TRL leaves it out of the group baseline,
  and a completion every reward leaves ``None`` gets no advantage.

Plug a new task in with ``@register_task("name")`` on a builder (or an entry point in the group
``sotopia_env.rl_tasks``, for an installed package); ``training.rl.builtin`` registers
``socialiqa``, ``social_r1`` and ``item_selection``, ``training.rl.social_turns`` registers ``social_turns``.
"""

from __future__ import annotations

from typing import Any

import sotopia_env.training.rl.builtin  # noqa: F401  (registers the built-in tasks)
import sotopia_env.training.rl.social_turns  # noqa: F401
from sotopia_env.training.rl.registry import TASKS, RewardFunc, RLTask, TaskError, register_task

__all__ = ["TASKS", "RLTask", "RewardFunc", "TaskError", "build_task", "register_task", "task_names"]


def task_names() -> list[str]:
    return TASKS.names()


def build_task(
    name: str, data: str | None = None, max_items: int | None = None, options: dict[str, Any] | None = None
) -> RLTask:
    """The registered task ``name`` on ``data`` (its first ``max_items`` items if given), with ``options``."""
    import inspect

    if name not in TASKS:
        raise TaskError(f"unknown RL task {name!r} (tasks: {', '.join(TASKS)})")
    builder = TASKS[name]
    try:
        inspect.signature(builder).bind(data, max_items, **(options or {}))
    except TypeError as exc:
        raise TaskError(f"task {name!r}: bad task_options ({exc})") from None
    return builder(data, max_items, **(options or {}))
