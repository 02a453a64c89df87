"""Evaluators extended from outside: a toy evaluator in a temporary folder (one module) used by its spec, from
Python, through the CLI on a real (tiny) model's episode, and through an entry point."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sotopia_env.evaluators import EvaluatorSpecError, make_evaluator, register_evaluator, unregister_evaluator

BREVITY = '''
"""A toy evaluator: the fewer words an agent needed, the higher its goal."""

from sotopia_env.actions import ActionType
from sotopia_env.evaluators import (
    GOAL_ONLY,
    AgentRating,
    DimensionScore,
    EpisodeRating,
    SyncFromAsync,
    register_evaluator,
)


class Brevity(SyncFromAsync):
    name = "brevity"

    def __init__(self, dimensions=GOAL_ONLY):
        if [d.name for d in dimensions] != ["goal"]:
            raise ValueError("brevity rates the goal dimension only (--dimensions goal)")
        self.dimensions = GOAL_ONLY

    async def aevaluate(self, context):
        ratings = {}
        for name in context.setup.agent_names:
            said = [t.action for t in context.turns if t.agent == name]
            words = sum(len(a.argument.split()) for a in said if a.action_type is ActionType.speak)
            score = DimensionScore(score=max(0, 10 - words // 5), reasoning=f"{words} words")
            ratings[name] = AgentRating(scores={"goal": score})
        return EpisodeRating(evaluator=self.name, ratings=ratings)


register_evaluator("brevity", Brevity)
'''


@pytest.fixture
def brevity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The toy evaluator's module in the user's folder, registered by importing it; forgotten afterwards."""
    (tmp_path / "brevity_judge.py").write_text(BREVITY)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield importlib.import_module("brevity_judge")
    unregister_evaluator("brevity")
    sys.modules.pop("brevity_judge", None)


def test_a_registered_evaluator_rates_a_models_episode_by_its_spec(brevity, tmp_path, tiny_model_dir):
    from sotopia_env.cli.main import app
    from sotopia_env.episodes.store import open_store

    assert type(make_evaluator("Brevity ", "goal")) is brevity.Brevity  # specs are case- and space-insensitive
    with pytest.raises(ValueError, match="goal dimension only"):
        make_evaluator("brevity")  # its own checks of the dimensions run, as the built-in judges' do
    with pytest.raises(EvaluatorSpecError, match="'brevity' is taken"):
        register_evaluator("brevity", lambda dims: None)

    store = f"sqlite:///{tmp_path / 'e.db'}"
    model = str(tiny_model_dir)
    args = ["run", "--agent1", model, "--agent2", model, "--max-turns", "4", "--evaluator", "brevity"]
    result = CliRunner().invoke(app, [*args, "--dimensions", "goal", "--store", store])
    assert result.exit_code == 0, result.output
    assert "ratings by brevity" in result.output
    (log,) = open_store(store).iter()
    assert log.rating.evaluator == "brevity" and log.protocol.judge == "brevity"
    for name in log.setup.agent_names:
        words = sum(
            len(t.action.argument.split()) for t in log.turns if t.agent == name and t.action.action_type == "speak"
        )
        assert log.rating.ratings[name].scores["goal"].reasoning == f"{words} words"
        assert log.rating.ratings[name].scores["goal"].score == max(0, 10 - words // 5)

    bad = CliRunner().invoke(app, [*args, "--no-store"])  # all seven dimensions: refused before playing, one line
    assert bad.exit_code == 1 and "goal dimension only" in bad.output and "Traceback" not in bad.output


def test_an_installed_evaluator_is_found_by_its_entry_point(tmp_path):
    (tmp_path / "brevity_judge.py").write_text(BREVITY.replace('\n\nregister_evaluator("brevity", Brevity)\n', "\n"))
    dist = tmp_path / "brevity_judge-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: brevity-judge\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[sotopia_env.evaluators]\nbrevity = brevity_judge:Brevity\n")
    script = str(Path(sys.executable).parent / "sotopia-env")
    expert = "sotopia_env.training.experts:ScriptedExpert"
    args = ["run", "--agent1", expert, "--agent2", expert, "--max-turns", "2", "--no-store"]
    env = os.environ | {"PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [script, *args, "--evaluator", "brevity", "--dimensions", "goal"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr
    assert "ratings by brevity" in result.stdout
