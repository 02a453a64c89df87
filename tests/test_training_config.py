"""The pipeline config (one-line errors naming file and field), its scenario checks, and the train CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sotopia_env.cli.main import app
from sotopia_env.training.config import ConfigError, load_config, parse_config

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("name", ["pipeline-cpu.yaml", "pipeline-7b-gpu.yaml"])
def test_example_configs_are_valid(name):
    config = load_config(EXAMPLES / name)
    assert config.bc.enabled and config.sr.rounds >= 1 and config.eval.enabled


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"bc": {"expertt": "gpt-4o"}}, "bc.expertt"),
        ({"train": {"lora_r": "big"}}, "train.lora_r"),
        ({"train": {"base_model": "x"}}, "train.base_model"),
        ({"sr": {"train": {"learning_rte": 1}}}, "sr.train.learning_rte"),
        ({"sr": {"rounds": -1}}, "sr.rounds"),
        ({"eval": {"episodes_per_scenario": 0}}, "eval.episodes_per_scenario"),
        ({"env": {"action_order": "sideways"}}, "env.action_order"),
        ({"bc": {"filter": {"min_goal": "high"}}}, "bc.filter.min_goal"),
        ({"store_retry_seconds": -1}, "store_retry_seconds"),
    ],
)
def test_bad_fields_give_one_line_naming_file_and_field(raw, field):
    with pytest.raises(ConfigError) as err:
        parse_config({"output_dir": "out", **raw}, "my.yaml")
    message = str(err.value)
    assert message.startswith(f"my.yaml: field '{field}'") and "\n" not in message


def test_missing_output_dir_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="field 'output_dir'"):
        parse_config({}, "a.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("bc: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: line \d+ invalid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_stage_overrides_reach_the_train_config():
    config = parse_config({"output_dir": "o", "sr": {"train": {"max_steps": 3}}}, "c.yaml")
    train = config.train_config("sr", config.sr.train, output_dir="o/sr1", base_model="b")
    assert (train.max_steps, train.output_dir, train.base_model) == (3, "o/sr1", "b")


def test_scenario_selectors_keep_test_out_of_training_and_train_out_of_evaluation(tmp_path):
    from sotopia_env.training.context import StageContext

    ctx = StageContext.open(parse_config({"output_dir": str(tmp_path / "o")}, "c.yaml"), progress=False)
    assert all(s.split == "train" for s in ctx.scenarios("bc.scenarios", "train"))
    with pytest.raises(ConfigError, match="c.yaml: field 'bc.scenarios': scenario .* is in the test split"):
        ctx.scenarios("bc.scenarios", "test")
    with pytest.raises(ConfigError, match="field 'eval.scenarios': scenario .* is in the train split"):
        ctx.scenarios("eval.scenarios", "all", held_out=True)
    with pytest.raises(ConfigError, match="unknown scenario id 'nope'"):
        ctx.scenarios("sr.scenarios", "nope")
    assert ctx.tag("bc") == "o/bc"


@pytest.mark.parametrize("command", ["pipeline", "bc", "sr", "eval", "status", "dataset"])
def test_every_train_command_has_help(command):
    result = CliRunner().invoke(app, ["train", command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_cli_reports_a_bad_config_in_one_line(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("output_dir: out\ntrain:\n  lora_r: big\n")
    result = CliRunner().invoke(app, ["train", "pipeline", str(config)])
    assert result.exit_code == 1
    assert "field 'train.lora_r'" in result.output and "Traceback" not in result.output


def test_a_store_that_is_down_stops_the_pipeline_before_it_plays(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"output_dir: {tmp_path / 'out'}\nstore: redis://127.0.0.1:1/0\n")
    result = CliRunner().invoke(app, ["train", "pipeline", str(config)])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.output.strip() == "error: cannot reach Redis at redis://127.0.0.1:1: Connection refused"


def test_sr_before_bc_is_refused(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(f"output_dir: {tmp_path / 'out'}\neval:\n  enabled: false\n")
    result = CliRunner().invoke(app, ["train", "sr", str(config)])
    assert result.exit_code == 1 and "stage 'bc' has not finished yet" in result.output


def test_dataset_command_writes_examples(tmp_path):
    from episode_fixtures import make_episode

    from sotopia_env.episodes.store import open_store

    url = f"sqlite:///{tmp_path / 'e.db'}"
    store = open_store(url)
    store.put_many([make_episode(0, tag="t"), make_episode(1, tag="t", status="unrated")])
    out = tmp_path / "d.jsonl"
    result = CliRunner().invoke(app, ["train", "dataset", "--tag", "t", "--store", url, "--out", str(out), "--all"])
    assert result.exit_code == 0, result.output
    assert "1 unrated skipped" in result.output
    assert len(out.read_text().splitlines()) == 7  # 8 turns, one of them `none`
