"""One registry style for every extension point (``sotopia_env.registry.Registry``): kinds, games, evaluators,
trainers and RL tasks refuse a taken name with one line and load an installed package's entry points; and the two
GRPO configs declare each shared name once, with one default (TRL's, where TRL has the field)."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sotopia_env.registry import Registry, RegistryError


def _registries() -> dict[str, Registry]:
    from sotopia_env.evaluators.factory import EVALUATORS
    from sotopia_env.games.registry import GAMES
    from sotopia_env.kinds.registry import KINDS
    from sotopia_env.training.rl.registry import TASKS
    from sotopia_env.training.trainers import TRAINERS

    return {"kinds": KINDS, "games": GAMES, "evaluators": EVALUATORS, "trainers": TRAINERS, "rl_tasks": TASKS}


@contextlib.contextmanager
def _all_scoped(reload: bool = False) -> Iterator[dict[str, Registry]]:
    registries = _registries()
    with contextlib.ExitStack() as stack:
        for registry in registries.values():
            stack.enter_context(registry.scoped(reload=reload))
        yield registries


# -- the generic registry -----------------------------------------------------------------------------------------


def test_a_registry_registers_by_call_and_decorator_and_refuses_a_taken_name_in_one_line():
    reg: Registry = Registry("toy")

    @reg.register("first")
    def first() -> int:
        return 1

    def second() -> int:
        return 2

    assert reg.register("second", second) is second and reg.register("first", first) is first  # the same again
    assert reg.lookup("first") is first and list(reg) == ["first", "second"] and "second" in reg
    with pytest.raises(RegistryError) as error:
        reg.register("first", second)
    assert "the toy name 'first' is taken by" in str(error.value) and "\n" not in str(error.value)
    assert reg.register("first", second, replace=True) is second and reg["first"] is second
    with pytest.raises(RegistryError, match=r"^unknown toy 'third' \(known: first, second\)$"):
        reg.lookup("third")
    with pytest.raises(RegistryError, match="must be lower case"):
        reg.register("Bad Name", first)
    with reg.scoped():
        reg.register("third", first)
    assert "third" not in reg


# -- every registry -------------------------------------------------------------------------------------------------


def _taken(name: str):
    """A call that registers another item under a name the registry ``name`` holds already."""
    if name == "kinds":
        from sotopia_env.kinds import register_kind
        from sotopia_env.kinds.bargaining import Bargaining

        return lambda: register_kind(type("Bargaining2", (Bargaining,), {})())
    if name == "games":
        from sotopia_env.games.registry import register_game
        from sotopia_env.games.werewolf import Werewolf

        return lambda: register_game(type("Werewolf2", (Werewolf,), {})())
    if name == "evaluators":
        from sotopia_env.evaluators import register_evaluator

        return lambda: register_evaluator("rule-based", lambda dimensions: None)
    if name == "trainers":
        from sotopia_env.training.grpo import GRPOStageConfig
        from sotopia_env.training.trainers import Trainer, register_trainer

        return lambda: register_trainer(Trainer("grpo", "another", GRPOStageConfig, lambda c: None, ("other-task",)))
    from sotopia_env.training.rl.registry import register_task

    return lambda: register_task("socialiqa")(lambda data, max_items: None)


@pytest.mark.parametrize("name", ["kinds", "games", "evaluators", "trainers", "rl_tasks"])
def test_registering_a_taken_name_fails_with_one_line(name):
    with _all_scoped() as registries:
        register = _taken(name)
        with pytest.raises(registries[name].error) as error:
            register()
        message = str(error.value)
        assert "is taken by" in message and "\n" not in message, message


PLUGIN = """
from dataclasses import dataclass
from typing import Literal

from sotopia_env.evaluators.rule_based import RuleBasedEvaluator
from sotopia_env.games.werewolf import Werewolf
from sotopia_env.kinds.bargaining import Bargaining, BargainingFacts
from sotopia_env.training.base_config import BaseTrainConfig
from sotopia_env.training.trainers import Trainer


class ToyFacts(BargainingFacts):
    kind: Literal["toy-kind"] = "toy-kind"


class ToyKind(Bargaining):
    name = "toy-kind"
    facts_model = ToyFacts


class ToyGame(Werewolf):
    name = "toy-game"


@dataclass
class ToyConfig(BaseTrainConfig):
    task: str = "toy-trainer-task"


def judge(dimensions):
    return RuleBasedEvaluator(dimensions)


def build_task(data, max_items):
    raise NotImplementedError


KIND = ToyKind()
TRAINER = Trainer("toy-trainer", "the toy", ToyConfig, lambda config: None, ("toy-trainer-task",))
"""

ENTRY_POINTS = """\
[sotopia_env.kinds]
toy-kind = toy_plugin:KIND

[sotopia_env.games]
toy-game = toy_plugin:ToyGame

[sotopia_env.evaluators]
toy-judge = toy_plugin:judge

[sotopia_env.trainers]
toy-trainer = toy_plugin:TRAINER

[sotopia_env.rl_tasks]
toy-task = toy_plugin:build_task
"""


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed distribution (a dist-info on ``sys.path``) with one entry point in each group."""
    (tmp_path / "toy_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "toy_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("toy_plugin", None)


@pytest.mark.parametrize(
    "name, entry",
    [
        ("kinds", "toy-kind"),
        ("games", "toy-game"),
        ("evaluators", "toy-judge"),
        ("trainers", "toy-trainer"),
        ("rl_tasks", "toy-task"),
    ],
)
def test_each_registry_loads_an_installed_packages_entry_point(planted, name, entry):
    with _all_scoped(reload=True) as registries:
        registry = registries[name]
        assert registry.group == f"sotopia_env.{name}"
        assert entry in registry and entry in registry.names()
        found = registry.lookup(entry)
        plugin = sys.modules["toy_plugin"]
        expected = {
            "kinds": plugin.KIND,
            "evaluators": plugin.judge,
            "trainers": plugin.TRAINER,
            "rl_tasks": plugin.build_task,
        }
        if name == "games":
            assert isinstance(found, plugin.ToyGame)  # a class stands for its one instance
        else:
            assert found is expected[name]
    assert found not in registry.held()  # the scope forgot it


def test_the_public_lookups_find_entry_points(planted):
    from sotopia_env.evaluators import evaluator_names, make_evaluator
    from sotopia_env.kinds import rule_set
    from sotopia_env.training.rl.tasks import task_names
    from sotopia_env.training.trainers import trainer_for_task

    with _all_scoped(reload=True):
        assert rule_set("toy-kind").name == "toy-kind" and rule_set("toy-game", "game").name == "toy-game"
        assert "toy-judge" in evaluator_names() and type(make_evaluator("toy-judge")).__name__ == "RuleBasedEvaluator"
        assert "toy-task" in task_names()
        assert trainer_for_task("toy-trainer-task").name == "toy-trainer"


# -- the GRPO configs ---------------------------------------------------------------------------------------------


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default is dataclasses.MISSING else f.default  # type: ignore[misc]


def test_the_two_grpo_configs_share_one_default_per_name():
    from sotopia_env.training.base_config import GRPOBaseConfig
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig
    from sotopia_env.training.grpo import GRPOStageConfig

    text = {f.name: f for f in dataclasses.fields(GRPOStageConfig)}
    episodes = {f.name: f for f in dataclasses.fields(EpisodeGRPOConfig)}
    differ = sorted(n for n in text.keys() & episodes.keys() if _default(text[n]) != _default(episodes[n]))
    assert set(differ) <= set(GRPOBaseConfig.PER_TRAINER), differ
    shared = {f.name for f in dataclasses.fields(GRPOBaseConfig)}
    for config in (GRPOStageConfig, EpisodeGRPOConfig):  # a shared field is declared once, in the base
        again = (set(config.__annotations__) & shared) - set(GRPOBaseConfig.PER_TRAINER)
        assert not again, f"{config.__name__} declares {sorted(again)} again"
    assert (GRPOStageConfig().beta, GRPOStageConfig().temperature, GRPOStageConfig().scale_rewards) == (
        EpisodeGRPOConfig().beta,
        EpisodeGRPOConfig().temperature,
        EpisodeGRPOConfig().scale_rewards,
    )


def test_the_shared_grpo_defaults_are_trls():
    trl = pytest.importorskip("trl")
    from sotopia_env.training.base_config import GRPOBaseConfig
    from sotopia_env.training.grpo import TRL_FIELDS, GRPOStageConfig

    theirs = {f.name: _default(f) for f in dataclasses.fields(trl.GRPOConfig)}
    ours = {f.name: _default(f) for f in dataclasses.fields(GRPOBaseConfig)}
    for name in ("beta", "temperature", "scale_rewards"):
        assert ours[name] == theirs[name], name
    for name in TRL_FIELDS:  # passed on only when set: TRL's own default otherwise
        assert name in theirs and getattr(GRPOStageConfig(), name) is None


def test_bad_shared_grpo_values_are_refused_by_both_configs():
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig
    from sotopia_env.training.grpo import GRPOStageConfig

    for config in (GRPOStageConfig, EpisodeGRPOConfig):
        for bad in ({"beta": -1.0}, {"temperature": 0.0}, {"scale_rewards": "step"}):
            with pytest.raises(ValueError):
                config(**bad)


def test_a_grpo_result_reads_as_its_trainer_says():
    from sotopia_env.training.rl_result import GRPOResult
    from sotopia_env.training.trainers import trainer_for_task

    assert trainer_for_task("episodes").words is not None
    episodes = GRPOResult("m", "episodes", 1, 3, [1.0], 2, 1, 1.0)
    text = GRPOResult("m", "socialiqa", 1, 3, [1.0], 2, 1, 1.0)
    assert episodes.dataset() == "episodes: 3 starts" and text.dataset() == "socialiqa: 3 prompts"
    assert episodes.note() == "unrated episodes: 2, groups without signal: 1"
    assert text.note() == "None rewards: 2, unscorable batches skipped: 1"
