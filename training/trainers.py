"""The trainer registry: which trainer a config's ``task`` chooses, for the pipeline's ``rl:`` stage and for
``sotopia-env train run`` (a trainer alone, on its own YAML file).

A trainer is one module: a config dataclass that extends ``BaseTrainConfig`` and has a ``task`` field, and a train
function ``train(config) -> result`` (a dataclass with ``model_dir``, ``dataset()`` and ``note()``, as
``GRPOResult``). Registering it is one line, ``register_trainer(Trainer(...))`` (``TRAINERS``, a
``sotopia_env.registry.Registry``), below for the built-in ones; an installed package registers its own with an
entry point in the group ``sotopia_env.trainers`` (``toy = my_package.toy:TRAINER``, a ``Trainer``), loaded on the
first lookup. The config parsing (``training.config.parse_rl_config``), the ``rl:`` stage (``training.rl_stage``)
and the CLI then find it by its task. SFT (``training.sft``) is not here: BC and SR train with it on the datasets
they build.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from sotopia_env.registry import Registry, RegistryError
from sotopia_env.training import episode_grpo, grpo
from sotopia_env.training.base_config import BaseTrainConfig, PipelineInputs
from sotopia_env.training.rl.tasks import task_names
from sotopia_env.training.rl_result import RESULT_WORDS, ResultWords


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
    words: ResultWords | None = None  # how a GRPOResult of its tasks reads, when not as text GRPO's

    def task_names(self) -> list[str]:
        return sorted(self.tasks() if callable(self.tasks) else self.tasks)


ENTRY_POINT_GROUP = "sotopia_env.trainers"
DEFAULT_TRAINER = "grpo"  # for a config that names no task


def _check_trainer(trainer: Any, where: str) -> Trainer:
    """A trainer's config has a ``task`` field, and no task of it is another trainer's."""
    if not isinstance(trainer, Trainer):
        raise RegistryError(f"{where}: {trainer!r} is not a sotopia_env.training.trainers.Trainer")
    if "task" not in trainer.config.__dataclass_fields__:
        raise RegistryError(f"trainer {trainer.name!r}: its config {trainer.config.__name__} has no 'task' field")
    for other in TRAINERS.held():
        shared = set(other.task_names()) & set(trainer.task_names())
        if other.name != trainer.name and shared:
            raise RegistryError(f"trainer {trainer.name!r}: task {sorted(shared)[0]!r} is trainer {other.name!r}'s")
    return trainer


class _TrainerRegistry(Registry[Trainer]):
    """The trainers; a trainer's ``words``, if any, are how the results of its tasks read (``RESULT_WORDS``)."""

    def add(self, item: Any, where: str, name: str | None = None, replace: bool = False) -> Trainer:
        trainer = super().add(item, where, name, replace)
        if trainer.words is not None:
            for task in trainer.task_names():
                RESULT_WORDS.register(task, trainer.words, replace=True)
        return trainer


TRAINERS: Registry[Trainer] = _TrainerRegistry(
    "trainer", ENTRY_POINT_GROUP, check=_check_trainer, name_of=lambda trainer: trainer.name
)


def register_trainer(trainer: Trainer, replace: bool = False) -> Trainer:
    """Add ``trainer``; a name another trainer has is a ``RegistryError`` (a ValueError) unless ``replace``, and so is
    a task another trainer has."""
    return TRAINERS.register(trainer, replace=replace)


def trainers() -> list[Trainer]:
    return list(TRAINERS.values())


def trainer_for_task(task: str | None) -> Trainer | None:
    """The trainer whose tasks include ``task`` (None: the default trainer); None when no trainer has it."""
    if task is None:
        return TRAINERS.lookup(DEFAULT_TRAINER)
    return next((t for t in TRAINERS.values() if task in t.task_names()), None)


def all_task_names() -> list[str]:
    return sorted(name for t in TRAINERS.values() for name in t.task_names())


def trainer_of(config: BaseTrainConfig) -> Trainer:
    """The trainer of a parsed config (by its class)."""
    for trainer in TRAINERS.values():
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
        words=ResultWords(items="starts", nones="unrated episodes", unscorable="groups without signal"),
    )
)
