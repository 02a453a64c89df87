"""BC from expert episodes that already exist (``bc.source``): a store tag or an imported file, no expert model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from episode_fixtures import make_episode
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401
from typer.testing import CliRunner

from sotopia_env.training.config import ConfigError, parse_config

PI = Path(__file__).parent / "data" / "sotopia_pi_episodes.json"  # SOTOPIA-pi's six fields, unrated
NO_RATING_FILTERS = {"top1_per_scenario_role": False, "min_goal": None}


def _config(tmp_path: Path, base_model: str, source: dict, **bc) -> dict:
    return {
        "output_dir": str(tmp_path / "run"),
        "base_model": base_model,
        "bc": {"source": source, **bc},
        "sr": {"rounds": 0},
        "eval": {"enabled": False},
        "train": {"lora_r": 4, "lora_alpha": 8, "max_steps": 2, "batch_size": 2, "max_length": 768, "progress": False},
    }


def _write(tmp_path: Path, raw: dict) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_bc_clones_an_imported_sotopia_pi_file(tmp_path, tmp_path_factory):
    from sotopia_env.cli.main import app
    from sotopia_env.training.pipeline import PipelineState

    raw = _config(tmp_path, tiny_model_spec(tmp_path_factory), {"path": str(PI), "format": "sotopia"})
    raw["bc"]["filter"] = NO_RATING_FILTERS
    result = CliRunner().invoke(app, ["train", "bc", str(_write(tmp_path, raw)), "--quiet"])
    assert result.exit_code == 0, result.output
    bc = PipelineState.load(tmp_path / "run").stages["bc"]
    assert bc["episodes"] == {"total": 3, "rated": 0, "unrated": 3, "failed": 0}
    # 18 turns, two of them `none` (dropped): 7 + 4 + 5 examples
    assert bc["dataset"].startswith("3 episodes, 3 unrated: rating filters off (0 failed skipped)")
    assert "6/6 agent-episodes kept; 16/18 turns kept" in bc["dataset"], bc["dataset"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "bc" / "dataset.jsonl").read_text().splitlines()]
    assert len(rows) == 16
    deal = next(r for r in rows if r["completion"][0]["content"] == '{"action_type": "speak", "argument": "Deal."}')
    prompt = "\n".join(m["content"] for m in deal["prompt"])
    assert "Two housemates share a small kitchen" in prompt and deal["agent"] == "Liam Johnson"
    assert "Keep enough room for the bistro leftovers" in prompt and "Get two shelves" not in prompt  # own goal only
    assert bc["train"]["steps"] == 2 and all(loss == loss for loss in bc["train"]["losses"])  # finite, not NaN
    assert (Path(bc["model"]) / "adapter" / "adapter_model.safetensors").is_file()


def test_rating_filters_on_unrated_data_is_a_one_line_error(tmp_path):
    from sotopia_env.cli.main import app

    raw = _config(tmp_path, "unused", {"path": str(PI), "format": "sotopia"})  # default filter: top-1 by rating
    result = CliRunner().invoke(app, ["train", "bc", str(_write(tmp_path, raw)), "--quiet"])
    assert result.exit_code == 1
    message = result.output.strip()
    assert "field 'bc.source': none of its episodes is rated (3 unrated)" in message and "Traceback" not in message
    assert "top1_per_scenario_role: false" in message and len(message.splitlines()) == 1


def test_test_split_scenarios_are_refused_even_when_imported(tmp_path):
    from sotopia_env.cli.main import app

    rows = json.loads(PI.read_text(encoding="utf-8"))
    rows[1]["codename"] = "one_quiet_room"  # the codename of a test scenario of the library
    data = tmp_path / "pi.json"
    data.write_text(json.dumps(rows), encoding="utf-8")
    raw = _config(tmp_path, "unused", {"path": str(data), "format": "sotopia"}, filter=NO_RATING_FILTERS)
    result = CliRunner().invoke(app, ["train", "bc", str(_write(tmp_path, raw)), "--quiet"])
    assert result.exit_code == 1
    assert "episode 01HER8PQ60D1S5E8G3H6JK7MNC is from test scenario" in result.output
    assert "may not be trained on" in result.output and "Traceback" not in result.output


def test_a_store_tag_or_our_jsonl_as_source(tmp_path):
    from sotopia_env.episodes.export import export_jsonl
    from sotopia_env.training.bc import expert_episodes
    from sotopia_env.training.context import StageContext
    from sotopia_env.training.dataset import build_dataset

    raw = _config(tmp_path, "unused", {"tag": "experts"})
    ctx = StageContext.open(parse_config(raw, "c.yaml"), progress=False)
    logs = [make_episode(0, tag="experts"), make_episode(1, tag="experts", status="unrated"), make_episode(2)]
    ctx.store.put_many(logs)
    got, tag, counts = expert_episodes(ctx)
    assert [log.id for log in got] == [logs[0].id, logs[1].id] and tag == "experts"
    assert counts == {"total": 2, "rated": 1, "unrated": 1, "failed": 0}
    _, stats = build_dataset(got, *ctx.config.bc.filter.build(0))
    assert stats.summary().startswith("2 episodes (0 failed and 1 unrated skipped); 2/2 agent-episodes kept")
    ctx.store.close()

    export_jsonl(logs, tmp_path / "ours.jsonl")
    ctx = StageContext.open(
        parse_config(_config(tmp_path, "x", {"path": str(tmp_path / "ours.jsonl")}), "c.yaml"), False
    )
    assert [log.id for log in expert_episodes(ctx)[0]] == [log.id for log in logs]
    ctx.store.close()
    ctx = StageContext.open(parse_config(_config(tmp_path, "x", {"tag": "nobody"}), "c.yaml"), progress=False)
    with pytest.raises(ConfigError, match=r"^c.yaml: field 'bc.source': no episodes with tag 'nobody' in sqlite"):
        expert_episodes(ctx)
    ctx.store.close()


def test_a_bad_source_file_is_a_one_line_error_naming_file_line_and_field(tmp_path):
    from sotopia_env.training.bc import expert_episodes
    from sotopia_env.training.context import StageContext

    rows = json.loads(PI.read_text(encoding="utf-8"))
    rows[2]["social_interactions"] = "Olivia Brown: [shout] no"
    data = tmp_path / "pi.json"
    data.write_text(json.dumps(rows), encoding="utf-8")
    raw = _config(tmp_path, "unused", {"path": str(data), "format": "sotopia"})
    ctx = StageContext.open(parse_config(raw, "c.yaml"), progress=False)
    with pytest.raises(ConfigError) as err:
        expert_episodes(ctx)
    ctx.store.close()
    message = str(err.value)
    assert message.startswith(f"c.yaml: field 'bc.source': {data}: row 2: ") and "\n" not in message
    assert "field 'social_interactions'" in message and "[shout]" in message


@pytest.mark.parametrize(
    ("source", "field", "why"),
    [
        ({"tag": "a", "path": str(PI)}, "bc.source", "either tag"),
        ({}, "bc.source", "either tag"),
        ({"path": "nowhere.json"}, "bc.source.path", "no such file"),
        ({"path": str(PI), "format": "csv"}, "bc.source.format", "'jsonl' or 'sotopia'"),
        ({"tag": "a", "format": "sotopia"}, "bc.source.format", "only for a path"),
        ({"tag": "a", "tags": "b"}, "bc.source.tags", "Unexpected"),
    ],
)
def test_bad_source_config_is_one_line(source, field, why):
    with pytest.raises(ConfigError) as err:
        parse_config({"output_dir": "o", "bc": {"source": source}}, "my.yaml")
    message = str(err.value)
    assert message.startswith(f"my.yaml: field '{field}'") and why in message and "\n" not in message
