"""The one evaluator factory: 'none', 'rule-based' and model specs, the same words everywhere."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from sotopia_env.cli.main import app
from sotopia_env.evaluators import LLMEvaluator, RuleBasedEvaluator, make_evaluator


def test_none_rule_based_and_model_specs() -> None:
    assert make_evaluator("none") is None and make_evaluator(" None ") is None
    rule = make_evaluator("rule-based", "goal")
    assert isinstance(rule, RuleBasedEvaluator) and [d.name for d in rule.dimensions] == ["goal"]
    judge = make_evaluator("qwen", "sotopia", api_base="http://127.0.0.1:9/v1")
    assert isinstance(judge, LLMEvaluator) and len(judge.dimensions) == 7
    assert judge.max_reasoning == 400 and judge.settings.max_new_tokens == (400 // 3 + 30) * 7 * 2
    with pytest.raises(ValueError, match="nonsense"):
        make_evaluator("rule-based", "nonsense")


def test_cli_and_pipeline_take_the_same_words(tmp_path) -> None:
    store = f"sqlite:///{tmp_path}/e.db"
    args = ["run", "--agent1", "custom_agents:PoliteAgent", "--agent2", "custom_agents:Quiet", "--max-turns", "2"]
    result = CliRunner().invoke(app, [*args, "--evaluator", "rule-based", "--store", store])
    assert result.exit_code == 0, result.output
    assert "ratings by rule-based" in result.output

    from sotopia_env.training.config import load_config
    from sotopia_env.training.context import StageContext

    config = tmp_path / "p.yaml"
    lines = ["base_model: smollm2-135m", f"output_dir: {tmp_path}/out", f"store: {store}", "evaluator: {model: none}"]
    config.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match="field 'evaluator.model': the pipeline rates its episodes; not 'none'"):
        StageContext.open(load_config(config), progress=False)
