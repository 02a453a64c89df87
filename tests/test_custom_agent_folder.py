"""``module:Class`` agents load from the user's own folder, as a console script runs them (not from tests/)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

AGENT = """
from sotopia_env.actions import AgentAction


class Stubborn:
    async def act(self, observation):
        return AgentAction(action_type="speak", argument="No, I will not move.")
"""


def sotopia_env(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).parent / "sotopia-env"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"SOTOPIA_ENV_STORE": str(cwd / "e.db")}
    return subprocess.run([str(script), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def run_args(spec: str) -> list[str]:
    return ["run", "--agent1", spec, "--agent2", spec, "--evaluator", "none", "--max-turns", "2", "--no-store"]


def test_agent_module_in_the_current_folder(tmp_path: Path) -> None:
    (tmp_path / "my_agents.py").write_text(AGENT)
    result = sotopia_env(*run_args("my_agents:Stubborn"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("No, I will not move.") == 2


def test_agents_path_option(tmp_path: Path) -> None:
    folder = tmp_path / "agents_here"
    folder.mkdir()
    (folder / "far_agents.py").write_text(AGENT)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    missing = sotopia_env(*run_args("far_agents:Stubborn"), cwd=elsewhere)
    assert missing.returncode == 1 and "module 'far_agents' not found" in missing.stderr
    assert "Traceback" not in missing.stderr
    found = sotopia_env("run", "--agents-path", str(folder), *run_args("far_agents:Stubborn")[1:], cwd=elsewhere)
    assert found.returncode == 0, found.stderr
    bad = sotopia_env("run", "--agents-path", str(tmp_path / "nope"), *run_args("x:Y")[1:], cwd=elsewhere)
    assert bad.returncode != 0 and "no such folder" in bad.stderr
