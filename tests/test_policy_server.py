"""The policy served by an inference server while a stage plays it (``policy_server:``), with a stand-in for vLLM.

``tests/policy_stand_in.py`` takes vLLM's arguments, records them, and answers every agent turn with the same
``speak``. The pipeline test checks the arguments of every start (the current round's adapter), that the
episodes were played through the server, and that a server dying mid-stage ends the stage with one line while
the episodes already stored are kept and a rerun resumes.
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from test_training_e2e import _config as e2e_config
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

from sotopia_env.training.config import ConfigError, parse_config
from sotopia_env.training.policy_server import PolicyServer, PolicyServerConfig, PolicyServerError

STAND_IN = Path(__file__).resolve().parent / "policy_stand_in.py"
HEALTH = "http://127.0.0.1:{port}/v1/models"
SPEAK = "I hear you, but let us find a way that works for both of us."  # the stand-in's every turn


def stand_in(record: Path, die_after: int | None = None) -> dict:
    """A ``policy_server`` section that starts the stand-in with vLLM's arguments."""
    python = shlex.quote(sys.executable)
    tail = f"--port {{port}} --record {shlex.quote(str(record))}"
    tail += f" --die-after {die_after}" if die_after is not None else ""
    return {
        "command": f"{python} {STAND_IN} serve {{base_model}} --enable-lora --lora-modules policy={{adapter}} {tail}",
        "full_command": f"{python} {STAND_IN} serve {{model}} --served-model-name policy {tail}",
        "health_url": HEALTH,
        "start_timeout": 30,
        "stop_timeout": 5,
    }


def records(path: Path) -> tuple[list[list[str]], list[str]]:
    """(the arguments of every start, the model of every chat request), in order."""
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [r["argv"] for r in rows if "argv" in r], [r["model"] for r in rows if "model" in r]


def served(argv: list[str]) -> str:
    """What a start served: the adapter of ``--lora-modules policy=ADAPTER``, or the model of a full start."""
    if "--lora-modules" in argv:
        return argv[argv.index("--lora-modules") + 1].removeprefix("policy=")
    return argv[1]


def test_pipeline_plays_through_the_server_and_survives_its_death(tmp_path, tmp_path_factory):
    from sotopia_env.episodes.store import open_store
    from sotopia_env.training.pipeline import PipelineState, run_stages

    base = tiny_model_spec(tmp_path_factory)
    record = tmp_path / "record.jsonl"
    raw = e2e_config(tmp_path, base)
    raw["concurrency"] = 1  # one episode at a time: the server dies between known requests
    raw["sr"].update(episodes_per_scenario=2, train={"max_steps": 2})
    raw["train"].update(max_steps=2)
    run = Path(raw["output_dir"])

    # 1. BC (the expert plays, no server), then SR1 with a server that dies at its 10th request
    run_stages(parse_config({**raw, "policy_server": stand_in(record)}), only=["bc"], progress=False)
    assert not record.exists()  # BC's expert is not the policy: no server
    dying = parse_config({**raw, "policy_server": stand_in(record, die_after=9)})
    with pytest.raises(PolicyServerError) as died:
        run_stages(dying, only=["sr1"], progress=False)
    message = str(died.value)
    assert "\n" not in message
    assert "exited with code 3 mid-stage" in message and "dying after 9 requests" in message
    assert "episodes stored under 'run/sr1' are kept" in message
    store = open_store(f"sqlite:///{run / 'episodes.db'}")
    kept = {log.id: log.status for log in store.iter("run/sr1")}
    assert 1 <= len(kept) < 4 and set(kept.values()) == {"rated"}, kept  # finished episodes only, none failed
    assert not PipelineState.load(run).done("sr1")

    # 2. the rerun, with a healthy server: SR1 resumes (its stored episodes kept), then everything else
    healthy = parse_config({**raw, "policy_server": stand_in(record)})
    state, report = run_stages(healthy, progress=False)
    assert list(state.stages) == ["bc", "eval-base", "eval-bc", "sr1", "eval-sr1"]
    sr1 = {log.id: log for log in store.iter("run/sr1")}
    assert len(sr1) == 4 and set(kept) <= set(sr1)
    assert state.stages["sr1"]["episodes"]["skipped"] == len(kept)
    assert [row.model for row in report.rows] == ["base", "bc", "sr1"]

    # every start served the current policy: the base model in full, then each round's adapter
    starts, models = records(record)
    adapter = {stage: str(run.resolve() / stage / "adapter") for stage in ("bc", "sr1")}
    # sr1 (died), eval-base, eval-bc, sr1 (rerun), eval-sr1
    expected = [adapter["bc"], base, adapter["bc"], adapter["bc"], adapter["sr1"]]
    assert [served(argv) for argv in starts] == expected
    assert "--enable-lora" in starts[0] and "--served-model-name" in starts[1]

    # the policy's turns were played through the server: every self-play turn is the stand-in's
    assert models and set(models) == {"policy"}
    turns = [turn for log in sr1.values() for turn in log.turns]
    assert turns and all(turn.action.argument == SPEAK for turn in turns)
    assert state.stages["sr1"]["train"]["steps"] == 2  # trained on them after the server stopped
    assert Path(state.stages["sr1"]["model"], "sotopia_model.json").is_file()

    # a stage rerun whose episodes are all stored starts no server
    run_stages(healthy, only=["eval-sr1"], force=True, progress=False)
    assert len(records(record)[0]) == len(starts)
    store.close()


def test_a_server_that_exits_before_it_is_healthy_is_one_line(tmp_path):
    python = shlex.quote(sys.executable)
    config = PolicyServerConfig(
        full_command=f"{python} -c \"print('CUDA out of memory'); raise SystemExit(7)\" {{port}}",
        health_url=HEALTH,
        start_timeout=30,
    )
    with pytest.raises(PolicyServerError) as exited:
        PolicyServer(config, "some/model", tmp_path / "server.log").start()
    assert "\n" not in str(exited.value)
    assert "exited with code 7 before it was healthy; its last line: CUDA out of memory" in str(exited.value)

    missing = PolicyServerConfig(full_command="no-such-server-binary {model} --port {port}", health_url=HEALTH)
    with pytest.raises(PolicyServerError, match="cannot run 'no-such-server-binary'.*policy_server.command"):
        PolicyServer(missing, "some/model", tmp_path / "server.log").start()


def test_a_server_never_healthy_times_out_and_is_stopped(tmp_path):
    python = shlex.quote(sys.executable)
    config = PolicyServerConfig(
        full_command=f'{python} -c "import time; time.sleep(60)" {{port}}', health_url=HEALTH, start_timeout=0.5
    )
    server = PolicyServer(config, "some/model", tmp_path / "server.log")
    with pytest.raises(PolicyServerError, match=r"not healthy at http://127\.0\.0\.1:\d+/v1/models after 0\.5 s"):
        server.start()
    assert server.exited()  # stopped, not left running


@pytest.mark.parametrize(
    ("section", "field"),
    [
        ({"command": "vllm serve {base_modl} --port {port}"}, "policy_server.command"),
        ({"full_command": ""}, "policy_server.full_command"),
        ({"start_timeout": 0}, "policy_server.start_timeout"),
        ({"commands": "x"}, "policy_server"),
    ],
)
def test_bad_policy_server_fields_name_the_field(section, field):
    with pytest.raises(ConfigError, match=rf"^cfg\.yaml: field '{field}"):
        parse_config({"output_dir": "runs/x", "policy_server": section}, "cfg.yaml")


def test_the_readme_policy_server_section_is_the_default_config():
    import yaml
    from readme_blocks import blocks

    (section,) = [yaml.safe_load(body) for lang, body in blocks("Running at scale") if "policy_server:" in body]
    config = parse_config({"output_dir": "runs/x", **section}, "README.md")
    assert config.policy_server == PolicyServerConfig()  # the defaults, as the README shows them
