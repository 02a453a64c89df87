"""One import namespace: the wheel holds ``sotopia_env`` alone, and a user's folders never shadow our modules.

The repository's folders ``agents/``, ``episodes/``, ``training/`` and ``cli/`` are imported as
``sotopia_env.agents`` and so on (``package-dir`` in pyproject.toml). The wheel is built here from the checkout's
files, as ``pip wheel`` builds it for a user.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

from sotopia_env.agents.loading import load_custom_agent

FOLDER_OF = {"sotopia_env": "sotopia_env", "agents": "sotopia_env/agents", "episodes": "sotopia_env/episodes"}
FOLDER_OF |= {"training": "sotopia_env/training", "cli": "sotopia_env/cli"}
BIN = Path(sys.executable).parent

AGENT = """
from sotopia_env.actions import AgentAction


class Stubborn:
    async def act(self, observation):
        return AgentAction(action_type="speak", argument="No, I will not move.")
"""
TRAP = "raise SystemExit('the user module {name} was imported in place of ours')\n"


def checkout_files() -> list[str]:
    """The files a clone of this checkout has (tracked, plus new files git does not ignore)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return [f for f in listed.stdout.splitlines() if (REPO / f).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    source = tmp_path_factory.mktemp("source")
    for name in checkout_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr
    (path,) = out.glob("sotopia_env-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_has_one_top_level_package(wheel: zipfile.ZipFile) -> None:
    top = {name.split("/")[0] for name in wheel.namelist()}
    dist_info = {t for t in top if t.endswith(".dist-info")}
    assert len(dist_info) == 1 and top - dist_info == {"sotopia_env"}, sorted(top)


def test_the_wheel_holds_every_module_under_the_namespace(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    expected = set()
    for path in checkout_files():
        folder, _, rest = path.partition("/")
        if folder in FOLDER_OF and path.endswith(".py"):
            expected.add(f"{FOLDER_OF[folder]}/{rest}")
    assert "sotopia_env/agents/loading.py" in expected and "sotopia_env/cli/main.py" in expected
    missing = sorted(expected - names)
    assert not missing, f"modules left out of the wheel (add their package to pyproject.toml): {missing}"
    assert "sotopia_env/py.typed" in names
    assert any(n.startswith("sotopia_env/data/scenarios/") and n.endswith(".yaml") for n in names)
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    assert "sotopia-env = sotopia_env.cli.main:app" in wheel.read(entry_points).decode()


def user_folder(tmp_path: Path) -> Path:
    """A research project's folder: its own ``agents/`` package, and a ``training.py``, an ``episodes/`` and a
    ``cli.py`` that fail loudly if anything of ours ever imports them."""
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "__init__.py").write_text("")
    (tmp_path / "agents" / "mine.py").write_text(AGENT)
    (tmp_path / "training.py").write_text(TRAP.format(name="training.py"))
    (tmp_path / "episodes").mkdir()
    (tmp_path / "episodes" / "__init__.py").write_text(TRAP.format(name="episodes/"))
    (tmp_path / "cli.py").write_text(TRAP.format(name="cli.py"))
    return tmp_path


def clean_env(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SOTOPIA_ENV_STORE")}
    return env | {"SOTOPIA_ENV_STORE": str(folder / "e.db"), "COLUMNS": "100"}


def python_in(folder: Path, code: str) -> str:
    """What ``python -c code`` prints, run in ``folder`` (first on its ``sys.path``); it must succeed."""
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=folder, env=clean_env(folder), capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_a_user_agents_package_works_and_their_modules_shadow_nothing(tmp_path: Path) -> None:
    folder = user_folder(tmp_path)
    run = [str(BIN / "sotopia-env"), "run", "--agent1", "agents.mine:Stubborn", "--agent2", "agents.mine:Stubborn"]
    run += ["--evaluator", "rule-based", "--max-turns", "2"]
    result = subprocess.run(run, cwd=folder, env=clean_env(folder), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("No, I will not move.") == 2
    listing = [str(BIN / "sotopia-env"), "episodes", "list"]
    listed = subprocess.run(listing, cwd=folder, env=clean_env(folder), capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "run" in listed.stdout, listed.stderr


def test_the_python_api_ignores_a_users_training_py(tmp_path: Path) -> None:
    """``python -c`` puts the current folder first on sys.path: our imports must still be ours."""
    folder = user_folder(tmp_path)
    code = (
        "import sotopia_env.training.pipeline, sotopia_env.episodes.runner, sotopia_env.cli.main\n"
        "from sotopia_env.episodes.store import open_store\n"
        "print(open_store().url)\n"
    )
    assert "e.db" in python_in(folder, code)


def test_loading_a_custom_agent_does_not_put_the_folder_first(tmp_path: Path, monkeypatch) -> None:
    folder = user_folder(tmp_path)
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for name in ("agents", "agents.mine"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    agent = load_custom_agent("agents.mine:Stubborn")
    assert type(agent).__module__ == "agents.mine"
    assert sys.modules["agents"].__file__ == str(folder / "agents" / "__init__.py")
    assert sys.path[-1] == str(folder.resolve()) and str(folder.resolve()) not in sys.path[:-1]  # appended
    assert "training" not in sys.modules and "episodes" not in sys.modules
    import sotopia_env.training.experts as experts

    assert experts.__name__ == "sotopia_env.training.experts"


def test_names_from_before_the_namespace_are_gone(tmp_path: Path) -> None:
    """``training.experts`` was our module before the one namespace; now it is only ever a user's (a fresh process:
    pytest itself puts the checkout's root, with its ``training/`` folder, on ``sys.path``)."""
    code = (
        "import sys\n"
        "from sotopia_env.agents.loading import AgentSpecError, load_custom_agent\n"
        "from sotopia_env.training.experts import ScriptedExpert\n"
        "assert type(load_custom_agent('sotopia_env.training.experts:ScriptedExpert')) is ScriptedExpert\n"
        "for old in ('training.experts:ScriptedExpert', 'agents.scripted:ScriptedAgent'):\n"
        "    try:\n"
        "        load_custom_agent(old)\n"
        "    except AgentSpecError as exc:\n"
        "        print(exc)\n"
        "assert 'training' not in sys.modules and 'agents' not in sys.modules\n"
    )
    assert python_in(tmp_path, code).splitlines() == [
        "agent spec 'training.experts:ScriptedExpert': module 'training' not found",
        "agent spec 'agents.scripted:ScriptedAgent': module 'agents' not found",
    ]
