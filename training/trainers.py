"""The trainer registry: which trainer a config's ``task`` chooses, for the pipeline's ``rl:`` stage and for
``sotopia-env train run`` (a trainer alone, on its own YAML file).

A trainer is one module: a config dataclass that extends ``BaseTrainConfig`` and has a ``task`` field, and a train
function ``train(config) -> result`` (a dataclass with ``model_dir``, ``dataset()`` and ``note()``, as
``GRPOResult``). Registering it is one line, ``register_trainer(Trainer(...))``, below for the built-in ones; the
config parsing (``training.config.parse_rl_config``), the ``rl:`` stage (``training.rl_stage``) and the CLI then
find it by its task. SFT (``training.sft``) is not here: BC and SR train with it on the datasets they build.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sotopia_env.training import episode_grpo, grpo
from sotopia_env.training.base_config import BaseTrainConfig, PipelineInputs
from sotopia_env.training.rl.tasks import task_names


class TrainerResult(Protocol):
    """What a trainer returns (a dataclass: the pipeline keeps it in ``state.json``)."""

    model_dir: str  # a model spec: the trained policy

    def dataset(self) -> str:
        """What it trained on, in words."""
        ...

    def note(self) -> str:
        """What the run could not score or skipped, in words ('' for nothing)."""
        ...


@dataclass(frozen=True)
class Trainer:
    """A trainer as the registry knows it."""

    name: str  # how the CLI and errors name it
    title: str  # what it trains, in words: "text GRPO"
    config: type[BaseTrainConfig]
    train: Callable[[Any], TrainerResult]
    tasks: Collection[str] | Callable[[], Collection[str]]  # the ``task`` values that choose it
    renamed: Mapping[str, str] = field(default_factory=dict)  # an old key -> its new name, said in the error
    in_pipeline: Callable[[Any, PipelineInputs], Any] | None = None  # the config, given what the pipeline offers

    def task_names(self) -> list[str]:
        return sorted(self.tasks() if callable(self.tasks) else self.tasks)


_TRAINERS: dict[str, Trainer] = {}
DEFAULT_TRAINER = "grpo"  # for a config that names no task


def register_trainer(trainer: Trainer) -> Trainer:
    """Add ``trainer`` (a later one of the same name replaces it); a task another trainer has is a ValueError."""
    if "task" not in trainer.config.__dataclass_fields__:
        raise ValueError(f"trainer {trainer.name!r}: its config {trainer.config.__name__} has no 'task' field")
    for other in _TRAINERS.values():
        shared = set(other.task_names()) & set(trainer.task_names())
        if other.name != trainer.name and shared:
            raise ValueError(f"trainer {trainer.name!r}: task {sorted(shared)[0]!r} is trainer {other.name!r}'s")
    _TRAINERS[trainer.name] = trainer
    return trainer


def trainers() -> list[Trainer]:
    return list(_TRAINERS.values())


def trainer_for_task(task: str | None) -> Trainer | None:
    """The trainer whose tasks include ``task`` (None: the default trainer); None when no trainer has it."""
    if task is None:
        return _TRAINERS[DEFAULT_TRAINER]
    return next((t for t in _TRAINERS.values() if task in t.task_names()), None)


def all_task_names() -> list[str]:
    return sorted(name for t in _TRAINERS.values() for name in t.task_names())


def trainer_of(config: BaseTrainConfig) -> Trainer:
    """The trainer of a parsed config (by its class)."""
    for trainer in _TRAINERS.values():
        if type(config) is trainer.config:
            return trainer
    raise ValueError(f"no trainer is registered for {type(config).__name__}")


register_trainer(
    Trainer("grpo", "text GRPO", grpo.GRPOStageConfig, grpo.train_grpo, task_names, in_pipeline=grpo.grpo_in_pipeline)
)
register_trainer(
    Trainer(
        "episode_grpo",
        "episode GRPO",
        episode_grpo.EpisodeGRPOConfig,
        episode_grpo.train_episode_grpo,
        ("episodes",),
        renamed={"batch_size": "micro_batch_size", "num_generations": "group_size"},  # before it had its own config
    )
)
