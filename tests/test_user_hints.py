"""Errors that say what was meant: a misspelt scenario, tag, model, judge or agent names the right one and the
command that lists them; a missing extra prints the exact install line; report plots stay on each scale.
Fast: no model is loaded, no episode is played."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sotopia_env import load_library, make_evaluator
from sotopia_env.embedded_models import ModelUnavailable
from sotopia_env.episodes.report import Cell, dimension_ranges, error_bar
from sotopia_env.errors import did_you_mean
from sotopia_env.library import LibraryError

runner = CliRunner()


def test_did_you_mean() -> None:
    assert did_you_mean("rule-basd", ["rule-based", "none"]) == "; did you mean 'rule-based'?"
    assert did_you_mean("zzz", ["rule-based"], "X lists them") == "; X lists them"
    assert did_you_mean("zzz", ["rule-based"]) == ""


def test_misspelt_scenario_id() -> None:
    with pytest.raises(LibraryError) as caught:
        load_library().select(["exchange-babysiting-meals"])
    message = str(caught.value)
    assert "unknown scenario id 'exchange-babysiting-meals'" in message
    assert "did you mean 'exchange-babysitting-meals'" in message and "sotopia-env scenarios list" in message
    assert "\n" not in message


@pytest.mark.parametrize(("selector", "meant"), [("hrad", "hard"), ("verifable:test", "verifiable"), ("tset", "test")])
def test_misspelt_tag_or_split(selector: str, meant: str) -> None:
    with pytest.raises(LibraryError) as caught:
        load_library().select(selector)
    message = str(caught.value)
    assert f"did you mean '{meant}'" in message and "sotopia-env scenarios list" in message, message
    assert "\n" not in message


def test_an_unknown_selector_says_tags_and_splits_count() -> None:
    with pytest.raises(LibraryError, match=r"nor a tag, a split or 'all'.*sotopia-env scenarios list"):
        load_library().select("nosuchtag")


def test_misspelt_tag_in_scenarios_list() -> None:
    from sotopia_env.cli.main import app

    result = runner.invoke(app, ["scenarios", "list", "--tag", "hrad"])
    assert result.exit_code == 1 and "did you mean 'hard'" in result.output, result.output


def test_misspelt_model() -> None:
    from sotopia_env.backends.resolve import resolve_backend

    with pytest.raises(ModelUnavailable) as caught:
        resolve_backend("smollm2-135")
    assert "did you mean 'smollm2-135m'" in str(caught.value) and "sotopia-env models list" in str(caught.value)


def test_misspelt_evaluator_lists_the_judges() -> None:
    with pytest.raises(ModelUnavailable) as caught:
        make_evaluator("rule-basd")
    message = str(caught.value)
    assert "did you mean 'rule-based'" in message, message
    assert all(name in message for name in ("none", "rule-based", "verifiable")), message
    assert "\n" not in message


def test_misspelt_agent_spec() -> None:
    from sotopia_env.agents.loading import load_agent

    with pytest.raises(ModelUnavailable, match="did you mean 'human'"):
        load_agent("humna")


@pytest.mark.parametrize("command", [["view"], ["serve"]])
def test_missing_extra_prints_the_install_line(command: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich markup once swallowed ``[view]``: the line must say ``pip install 'sotopia-env[view]'``."""
    from sotopia_env.cli.main import app

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # importing it now fails as a missing extra does
    result = runner.invoke(app, [*command, "--port", "1"])
    assert result.exit_code == 1, result.output
    assert "pip install 'sotopia-env[view]'" in result.output, result.output


def test_report_error_bars_stay_on_the_scale() -> None:
    ranges = dimension_ranges(["goal", "secret", "overall"])
    assert ranges["goal"] == (0.0, 10.0) and ranges["secret"] == (-10.0, 0.0)
    assert ranges["overall"] == (-5.0, 5.0)  # the mean of goal's and secret's ends
    below, above = error_bar(Cell(mean=6.75, low=-7.5, high=21.0, n=2), ranges["goal"])
    assert (6.75 - below, 6.75 + above) == (0.0, 10.0)
    assert error_bar(Cell(mean=1.0, low=math.nan, high=math.nan, n=1), ranges["goal"]) == (0.0, 0.0)
    assert dimension_ranges(["my_custom"]) == {}


def test_training_without_the_train_extra_prints_its_install_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from sotopia_env.cli.main import app

    for name in ("trl", "peft"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it now fails as a missing extra does
    config = Path(__file__).resolve().parents[1] / "examples" / "grpo-socialiqa-cpu.yaml"
    result = runner.invoke(app, ["train", "run", str(config)])
    assert result.exit_code == 1, result.output
    assert "pip install 'sotopia-env[train]'" in result.output, result.output
