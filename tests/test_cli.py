import json

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from sotopia_env.cli.main import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def all_command_paths(cmd=None, prefix=()):
    cmd = cmd or get_command(app)
    yield prefix
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from all_command_paths(sub, (*prefix, name))


@pytest.mark.parametrize("path", list(all_command_paths()), ids=lambda p: " ".join(p) or "root")
def test_every_command_has_help(path):
    result = invoke(*path, "--help")
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    cmd = get_command(app)
    for name in path:
        cmd = cmd.commands[name]
    assert (cmd.help or "").strip(), f"{' '.join(path)} has no help text"


def test_version():
    result = invoke("--version")
    assert result.exit_code == 0 and result.output.startswith("sotopia-env 0.")


def test_scenarios_and_characters(library):
    result = invoke("scenarios", "list", "--tag", "hard")
    assert result.exit_code == 0
    hard = [s for s in library.scenarios.values() if s.hard]
    assert f"{len(hard)} scenarios" in result.output
    sid = sorted(library.scenarios)[0]
    result = invoke("scenarios", "show", sid)
    assert result.exit_code == 0 and "goal 1:" in result.output
    assert invoke("scenarios", "show", "no-such").exit_code == 1
    result = invoke("characters", "list")
    assert result.exit_code == 0 and f"{len(library.characters)} characters" in result.output


def test_validate_accepts_good_and_rejects_broken(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(
        "scenarios:\n  - id: new-one\n    codename: new\n    scenario: A fine new scenario text.\n"
        "    goals: [get it, keep it]\n    relationship: stranger\n"
    )
    result = invoke("scenarios", "validate", good)
    assert result.exit_code == 0 and "ok: 1 scenarios" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("relationship: stranger", "relationship: rivals"))
    result = invoke("scenarios", "validate", bad)
    assert result.exit_code == 1
    line = " ".join(result.output.split())
    assert "bad.yaml" in line and "entry 0 (id 'new-one')" in line and "field 'relationship'" in line
    result = invoke("scenarios", "validate", tmp_path / "missing.yaml")
    assert result.exit_code == 1 and "no such file" in result.output


def test_run_store_list_show_export_import_report(tmp_path):
    store = f"sqlite:///{tmp_path}/eps.db"
    polite = "custom_agents:PoliteAgent"
    result = invoke(
        "run",
        "--agent1",
        polite,
        "--agent2",
        polite,
        "--evaluator",
        "none",
        "--max-turns",
        "3",
        "--store",
        store,
        "--tag",
        "cli",
    )
    assert result.exit_code == 0, result.output
    assert result.output.count('said: "After you."') == 3 and "ended: max_turns" in result.output
    result = invoke("episodes", "list", "--store", store, "--tag", "cli")
    assert result.exit_code == 0 and "1 shown of 1" in result.output
    from sotopia_env.episodes.store import open_store

    (log,) = open_store(store).query(tag="cli")
    result = invoke("episodes", "show", log.id[:8], "--store", store)
    assert result.exit_code == 0 and "After you." in result.output
    out = tmp_path / "eps.jsonl"
    assert invoke("episodes", "export", out, "--store", store).exit_code == 0
    assert json.loads(out.read_text().splitlines()[0])["id"] == log.id
    other = f"sqlite:///{tmp_path}/other.db"
    result = invoke("episodes", "import", out, "--store", other, "--tag", "imported")
    assert result.exit_code == 0 and "imported 1 episodes" in result.output
    assert open_store(other).get(log.id).tag == "imported"
    result = invoke("report", "--tag", "cli", "--store", store)
    assert result.exit_code == 0 and "unrated" in result.output
    assert invoke("report", "--tag", "nothing", "--store", store).exit_code == 1


def test_bad_specs_are_one_line_errors(tmp_path):
    result = invoke("run", "--agent1", "nowhere:Agent", "--evaluator", "none", "--no-store")
    assert result.exit_code == 1 and "module 'nowhere' not found" in result.output
    result = invoke("run", "--scenario", "no-such-scenario", "--evaluator", "none", "--no-store")
    assert result.exit_code == 1 and "unknown scenario id" in result.output
    result = invoke("episodes", "list", "--store", "redis://127.0.0.1:1/0")
    assert result.exit_code == 1 and "127.0.0.1:1" in result.output


def test_benchmark_both_seats_and_resume(tmp_path, library):
    store = f"sqlite:///{tmp_path}/b.db"
    ids = ",".join(sorted(library.scenarios)[:2])
    args = [
        "benchmark",
        "--model",
        "custom_agents:PoliteAgent",
        "--partner",
        "custom_agents:Quiet",
        "--evaluator",
        "none",
        "--scenarios",
        ids,
        "--max-turns",
        "2",
        "--store",
        store,
        "--tag",
        "b",
    ]
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert "4 episodes: 0 already done" in result.output
    result = invoke(*args)
    assert "4 episodes: 4 already done" in result.output
    from sotopia_env.episodes.store import open_store

    seats = {tuple(a.model for a in log.agents) for log in open_store(store).query(tag="b")}
    assert seats == {
        ("custom_agents:PoliteAgent", "custom_agents:Quiet"),
        ("custom_agents:Quiet", "custom_agents:PoliteAgent"),
    }


def test_import_of_a_broken_file_stores_nothing(tmp_path):
    store = f"sqlite:///{tmp_path}/eps.db"
    polite = "custom_agents:PoliteAgent"
    invoke("run", "--agent1", polite, "--agent2", polite, "--evaluator", "none", "--max-turns", "1", "--store", store)
    out = tmp_path / "eps.jsonl"
    invoke("episodes", "export", out, "--store", store)
    good = out.read_text().strip()
    broken = tmp_path / "broken.jsonl"
    bad_status = good.replace('"status":"unrated"', '"status":"great"')
    broken.write_text(good + "\n" + bad_status + "\n")
    target = f"sqlite:///{tmp_path}/target.db"
    result = invoke("episodes", "import", broken, "--store", target)
    assert result.exit_code == 1 and "broken.jsonl:2" in result.output and "status" in result.output
    from sotopia_env.episodes.store import open_store

    assert open_store(target).count() == 0


def test_agent_errors_are_stored_per_turn(tmp_path):
    store = f"sqlite:///{tmp_path}/eps.db"
    result = invoke(
        "run",
        "--agent1",
        "custom_agents:Crashing",
        "--agent2",
        "custom_agents:PoliteAgent",
        "--evaluator",
        "none",
        "--store",
        store,
        "--tag",
        "err",
    )
    assert result.exit_code == 0 and "agent error" in result.output and "ended: agent_error" in result.output
    from sotopia_env.episodes.store import open_store

    (log,) = open_store(store).query(tag="err")
    assert "ZeroDivisionError" in log.turns[0].action.error
