"""The README runs as written.

Its Quickstart, Custom agents, Episodes (export, import, report) and Python API blocks are extracted and run in
a subprocess from a temporary folder, through the installed ``sotopia-env`` script. Only these changes are made,
so that they run offline and fast:

- network models reach a loopback OpenAI-compatible server: ``OPENAI_BASE_URL`` points litellm's hosted models
  at it, and the README's example server URL ``http://localhost:8000/v1`` is replaced by its URL;
- ``human`` reads piped stdin;
- ``run`` gets ``--max-turns 2``; ``view`` and ``serve`` get a free ``--port`` and are stopped once they serve their
  first page (``serve``'s at the URL with the token it prints);
- the episode store and the working folder are temporary.

A README edit that breaks an example turns this test red.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import REPO, free_port
from loopback_openai import LoopbackOpenAI
from readme_blocks import blocks, strip_comment
from server_harness import printed_url

sys.path.insert(0, str(REPO / "benchmarks"))
from _loopback_server import respond  # noqa: E402  (valid actions and ratings for any of our schemas)

pytestmark = pytest.mark.model
EXAMPLE_SERVER = "http://localhost:8000/v1"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def server():
    with LoopbackOpenAI(respond) as srv:
        yield srv


@pytest.fixture(scope="module")
def folder(tmp_path_factory, embedded_model_path) -> Path:
    return tmp_path_factory.mktemp("readme")


def environment(folder: Path, server: LoopbackOpenAI) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SOTOPIA_ENV_STORE")}
    return env | {
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        "SOTOPIA_ENV_STORE": str(folder / "episodes.db"),
        "OPENAI_API_KEY": "sk-readme-test",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_BASE": server.base_url,
        "COLUMNS": "100",
    }


def shell_lines(section: str) -> list[str]:
    lines = []
    for lang, body in blocks(section):
        if lang in ("bash", "sh", "shell"):
            lines += [strip_comment(line) for line in body.splitlines()]
    return [line for line in lines if line and not line.startswith("pip ")]


def runnable(line: str, server: LoopbackOpenAI) -> str:
    line = line.replace(EXAMPLE_SERVER, server.base_url)
    words = shlex.split(line)
    if words[:2] == ["sotopia-env", "run"] and "--max-turns" not in words:
        line += " --max-turns 2"
    return line


def run_line(line: str, folder: Path, server: LoopbackOpenAI) -> str:
    """Run one README command in its own process group (killed whole on a time-out); its stdout."""
    command = runnable(line, server)
    stdin = "Hello, can we talk about it?\n" if "human" in shlex.split(command) else ""
    process = subprocess.Popen(
        command, shell=True, cwd=folder, env=environment(folder, server), stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = process.communicate(stdin, timeout=900)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        raise AssertionError(f"README command timed out: {line}\n{out[-2000:]}\n{err[-2000:]}") from None
    assert process.returncode == 0, f"README command failed: {line}\n{out[-3000:]}\n{err[-3000:]}"
    assert "Traceback" not in err, err
    return out


def serve_once(line: str, folder: Path, server: LoopbackOpenAI) -> str:
    """Start ``view`` or ``serve`` on a free port, fetch its first page (``serve``: the URL it printed, with the token
    it made), stop it."""
    port = free_port()
    process = subprocess.Popen(
        shlex.split(runnable(line, server)) + ["--port", str(port)], cwd=folder, env=environment(folder, server),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/"
        if shlex.split(line)[1] == "serve":
            printed = next((out for out in process.stdout if "?token=" in out), "")  # "" once it exited
            url = printed_url(printed)
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(url, timeout=5) as page:
                    return page.read().decode()
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"README command did not serve: {line}\n{process.stdout.read()}") from None
                time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=20)


def run_section(section: str, folder: Path, server: LoopbackOpenAI) -> list[str]:
    outputs = []
    for line in shell_lines(section):
        if shlex.split(line)[:2] in (["sotopia-env", "view"], ["sotopia-env", "serve"]):
            outputs.append(serve_once(line, folder, server))
        else:
            outputs.append(run_line(line, folder, server))
    return outputs


def write_python_files(section: str, folder: Path) -> list[str]:
    """Blocks that start with ``# name.py`` are files to write; the others are scripts to run."""
    scripts = []
    for lang, body in blocks(section):
        if lang != "python":
            continue
        first = body.splitlines()[0].strip()
        if re.fullmatch(r"#\s*[\w/]+\.py", first):
            (folder / first.lstrip("# ").strip()).write_text(body)
        else:
            scripts.append(body)
    return scripts


def test_quickstart(folder: Path, server: LoopbackOpenAI) -> None:
    outputs = run_section("Quickstart", folder, server)
    assert outputs, "the Quickstart has no commands"
    assert len(server.requests) > 0  # the hosted and --api-base models really talked to the loopback server
    assert any("stored episode" in out for out in outputs)


def test_custom_agents(folder: Path, server: LoopbackOpenAI) -> None:
    assert write_python_files("Custom agents", folder) == []
    assert (folder / "my_agents.py").is_file(), "the Custom agents section writes no my_agents.py"
    outputs = run_section("Custom agents", folder, server)
    assert outputs and all("stored episode" in out for out in outputs)


def test_episodes_export_import_report(folder: Path, server: LoopbackOpenAI) -> None:
    outputs = run_section("Episodes: export, import, report", folder, server)
    assert outputs


def test_python_api(folder: Path, server: LoopbackOpenAI) -> None:
    scripts = write_python_files("Python API", folder)
    assert scripts, "the Python API section has no script"
    for script in scripts:
        path = folder / "readme_api.py"
        path.write_text(script)
        result = subprocess.run(
            [sys.executable, str(path)], cwd=folder, env=environment(folder, server), capture_output=True, text=True,
            timeout=600,
        )  # fmt: skip
        assert result.returncode == 0, f"README Python API failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
