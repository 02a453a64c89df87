"""The README and the documentation site run as written, and the site builds strictly.

Every fenced block of README.md and of the site's pages (``docs/*.md``; see ``readme_blocks.pages``) runs, in that
order, from one temporary folder with one episode store, as a reader following them would: ``bash`` blocks line by
line through the installed ``sotopia-env`` script (``pip ...`` lines are left out: the install is the test's own),
``python`` blocks as scripts (or, when their first line is ``# name.py``, written as that file for the later blocks),
``yaml`` blocks parsed. A block that cannot run here (a GPU, an API key, a cluster, a dataset, minutes of training)
has ``<!-- not run: REASON -->`` on the line just above its fence; its Python is still compiled and its YAML still
parsed. Only these changes are made, so that the blocks run offline and fast:

- network models reach a loopback OpenAI-compatible server: ``OPENAI_BASE_URL`` points litellm's hosted models
  at it, and the README's example server URL ``http://localhost:8000/v1`` is replaced by its URL;
- ``human`` reads piped stdin;
- ``run`` gets ``--max-turns 2``; ``view`` and ``serve`` get a free ``--port`` and are stopped once they serve their
  first page (``serve``'s at the URL with the token it prints);
- the episode store and the working folder are temporary.

A docs edit that breaks an example turns this test red.
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
from readme_blocks import DOCS, README, Block, page_blocks, pages, strip_comment
from server_harness import printed_url

sys.path.insert(0, str(REPO / "benchmarks"))
from _loopback_server import respond  # noqa: E402  (valid actions and ratings for any of our schemas)

EXAMPLE_SERVER = "http://localhost:8000/v1"
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def server():
    with LoopbackOpenAI(respond) as srv:
        yield srv


@pytest.fixture(scope="module")
def folder(tmp_path_factory, embedded_model_path) -> Path:
    return tmp_path_factory.mktemp("docs")


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


SHELL = ("bash", "sh", "shell")
MAX_README_LINES = 250


def shell_lines(block: Block) -> list[str]:
    lines = [strip_comment(line) for line in block.body.splitlines()]
    return [line for line in lines if line and not line.startswith("pip ")]


def file_name(block: Block) -> str | None:
    """``name.py`` when a Python block is a file to write (its first line is ``# name.py``)."""
    match = re.fullmatch(r"#\s*([\w/]+\.py)", block.body.splitlines()[0].strip())
    return match.group(1) if match else None


def runnable_blocks() -> list[Block]:
    return [
        block
        for path in pages()
        for block in page_blocks(path)
        if block.not_run is None and (block.lang == "python" or (block.lang in SHELL and shell_lines(block)))
    ]


def runnable(line: str, server: LoopbackOpenAI) -> str:
    line = line.replace(EXAMPLE_SERVER, server.base_url)
    words = shlex.split(line)
    if words[:2] == ["sotopia-env", "run"] and "--max-turns" not in words:
        line += " --max-turns 2"
    return line


def run_line(line: str, folder: Path, server: LoopbackOpenAI) -> str:
    """Run one docs command in its own process group (killed whole on a time-out); its stdout."""
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
        raise AssertionError(f"docs command timed out: {line}\n{out[-2000:]}\n{err[-2000:]}") from None
    assert process.returncode == 0, f"docs command failed: {line}\n{out[-3000:]}\n{err[-3000:]}"
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
                    raise AssertionError(f"docs command did not serve: {line}\n{process.stdout.read()}") from None
                time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(timeout=20)


def run_shell(block: Block, folder: Path, server: LoopbackOpenAI) -> None:
    for line in shell_lines(block):
        words = shlex.split(line)
        if words[:2] in (["sotopia-env", "view"], ["sotopia-env", "serve"]):
            assert serve_once(line, folder, server), f"{block.page}:{block.line}: {line} served an empty page"
            continue
        calls = len(server.requests)
        out = run_line(line, folder, server)
        if words[:2] == ["sotopia-env", "run"]:
            assert "stored episode" in out, f"{block.page}:{block.line}: {line} stored no episode\n{out[-2000:]}"
        if EXAMPLE_SERVER in line or "gpt-4o-mini" in words:  # a hosted or --api-base model: the loopback answered
            assert len(server.requests) > calls, f"{block.page}:{block.line}: {line} called no model server"


def run_python(block: Block, folder: Path, server: LoopbackOpenAI) -> None:
    if name := file_name(block):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(block.body)
        return
    path = folder / "docs_block.py"
    path.write_text(block.body)
    result = subprocess.run(
        [sys.executable, str(path)], cwd=folder, env=environment(folder, server), capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip
    where = f"{block.page}:{block.line}"
    assert result.returncode == 0, f"{where} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"


@pytest.mark.model
@pytest.mark.parametrize("block", runnable_blocks(), ids=lambda block: f"{block.page}:{block.line}")
def test_block_runs(block: Block, folder: Path, server: LoopbackOpenAI) -> None:
    if block.lang == "python":
        run_python(block, folder, server)
    else:
        run_shell(block, folder, server)


def test_every_block_parses() -> None:
    """Not-run blocks too: Python compiles (top-level ``await`` allowed, as in a notebook), YAML loads."""
    import ast

    import yaml

    for path in pages():
        for block in page_blocks(path):
            where = f"{block.page}:{block.line}"
            if block.lang == "python":
                compile(block.body, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            elif block.lang == "yaml":
                assert yaml.safe_load(block.body) is not None, f"{where}: an empty YAML block"


FRONT_DOOR_PAGES = ("python-api.md", "quickstart.md")  # their Python imports our names from ``sotopia_env`` only


def test_the_api_pages_import_only_from_the_front_door() -> None:
    """Every Python block of the Python API page and of the quickstart imports our names from ``sotopia_env``
    itself (names of its ``__all__``), never from a module deeper down."""
    import ast

    import sotopia_env

    checked, deep = 0, []
    for page in FRONT_DOOR_PAGES:
        for block in page_blocks(DOCS / page):
            if block.lang != "python":
                continue
            checked += 1
            for node in ast.walk(ast.parse(block.body)):
                if isinstance(node, ast.Import):
                    deep += [
                        f"{block.page}:{block.line}: import {a.name}" for a in node.names if "sotopia_env." in a.name
                    ]
                elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "sotopia_env":
                    names = [a.name for a in node.names]
                    if node.module != "sotopia_env" or not set(names) <= set(sotopia_env.__all__):
                        deep.append(f"{block.page}:{block.line}: from {node.module} import {', '.join(names)}")
    assert checked >= len(FRONT_DOOR_PAGES) and deep == []


def test_the_readme_is_a_front_page() -> None:
    """At most 250 lines, its first block the two commands CI runs, and a link to every page of the site."""
    text = README.read_text()
    assert len(text.splitlines()) <= MAX_README_LINES, f"README.md has {len(text.splitlines())} lines"
    site = sorted(path.name for path in pages() if path.parent == DOCS)
    unlinked = [name for name in site if f"](docs/{name}" not in text]
    assert site and not unlinked, f"README.md links to no docs/{unlinked}"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site, built once with ``mkdocs build --strict`` (a few seconds)."""
    out = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
         "--site-dir", str(out)],
        capture_output=True, text=True, timeout=300, env=os.environ | {"NO_MKDOCS_2_WARNING": "1"},  # material's banner
    )  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0 and not re.search(r"^WARNING", output, re.M), output[-4000:]
    return out


def test_the_site_builds_strictly(site: Path) -> None:
    """``mkdocs build --strict``: a broken link or anchor, a page left out of the nav, any warning fails it."""
    built = {path.relative_to(site).as_posix() for path in site.rglob("index.html")}
    pages_ = [path.stem for path in pages() if path.parent == DOCS]
    expected = {"index.html"} | {f"{stem}/index.html" for stem in pages_ if stem != "index"}
    assert expected <= built, sorted(expected - built)
    assert not (site / "_hooks").exists()
    assert "\\|" not in (site / "cli" / "index.html").read_text()  # docs/_hooks/table_pipes.py ran


def _commands(cmd, path=()):
    if path:
        yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def test_the_cli_reference_has_every_command_and_option(site: Path) -> None:
    """The CLI page is generated from the Typer app (docs/_hooks/generated.py): every command, argument and option
    of ``sotopia-env`` is on it."""
    import html

    from typer.main import get_command

    from sotopia_env.cli.main import app

    page = html.unescape((site / "cli" / "index.html").read_text())
    missing = []
    for path, cmd in _commands(get_command(app)):
        if f"sotopia-env {' '.join(path)}" not in page:
            missing.append(" ".join(path))
        for param in getattr(cmd, "params", []):
            names = (
                [param.name.upper()] if param.param_type_name == "argument" else [*param.opts, *param.secondary_opts]
            )
            if param.name != "help" and not getattr(param, "hidden", False):
                missing += [f"{' '.join(path)} {name}" for name in names if f"<code>{name}</code>" not in page]
    assert not missing, f"docs/cli.md (generated) lacks: {missing}"


def test_the_api_reference_has_every_exported_name(site: Path) -> None:
    """Every name of ``sotopia_env.__all__`` is documented, from its docstring, on the API page."""
    import sotopia_env

    page = (site / "api" / "index.html").read_text()
    names = [name for name in sotopia_env.__all__ if name != "__version__"]
    missing = [name for name in names if f'id="{sotopia_env._LAZY[name]}.{name}"' not in page]
    assert names and not missing, f"docs/api.md (generated) lacks: {missing}"


def test_the_generated_reference_pages(site: Path) -> None:
    """The dimensions page has each dimension with its range; the catalogue every built-in scenario; the config
    page every key of a pipeline config."""
    import dataclasses

    from sotopia_env import load_library
    from sotopia_env.evaluators.dimensions import SOTOPIA_DIMENSIONS
    from sotopia_env.training.config import PipelineConfig

    dims = (site / "dimensions" / "index.html").read_text()
    assert all(f"<code>{d.name}</code></td>\n<td>{d.low} .. {d.high}</td>" in dims for d in SOTOPIA_DIMENSIONS)
    catalogue = (site / "catalogue" / "index.html").read_text()
    lib = load_library()
    assert [sid for sid in lib.scenarios if f"<code>{sid}</code>" not in catalogue] == []
    config = (site / "config" / "index.html").read_text()
    keys = [f.name for f in dataclasses.fields(PipelineConfig) if f.name != "source"]
    assert [key for key in keys if f"<code>{key}</code>" not in config] == []


def test_user_pages_name_no_issue_numbers() -> None:
    """Issue numbers and internals belong in CONTRIBUTING.md, benchmarks/README.md or the CHANGELOG."""
    found = [f"{path.name}:{n}" for path in pages() for n, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\bissue #\d+", line, re.I)]  # fmt: skip
    assert not found, found
