"""The import scan: no import circles between our modules, and no import that goes up the layers.

Every module of the package is parsed (``ast``); an import at module level or inside a function counts alike, an
import under ``if TYPE_CHECKING:`` does not (it never runs). The layers, lowest first (``CONTRIBUTING.md``):

- the LLM backends (``sotopia_env.backends`` and the model helpers they use: ``errors``, ``embedded_models``,
  ``model_ref``), which know nothing of scenarios, prompts or the env;
- the rest of ``sotopia_env`` (the world), then ``agents``, ``episodes``, ``training``, ``server``, ``cli``.

A module may import its own layer and the ones below, never one above. The one documented exception is the front
door, ``sotopia_env/__init__.py``: its ``__getattr__`` (PEP 562) loads each name of its ``_LAZY`` table on first
use, two of them from ``episodes/`` (``run_episode``, ``open_store``). Those loads are edges of the graph here (for
circles) and the only arrows up that are allowed.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = "sotopia_env"
# each top-level folder and the subpackage it is imported as (pyproject.toml's package-dir)
FOLDERS = {"sotopia_env": "", "agents": "agents", "episodes": "episodes", "training": "training"}
FOLDERS |= {"server": "server", "cli": "cli"}
LAYERS = ("backends", "sotopia_env", "agents", "episodes", "training", "server", "cli")  # lowest first
# the bottom layer: the LLM backends and the model helpers they use
FOUNDATION = ("sotopia_env.backends", "sotopia_env.errors", "sotopia_env.embedded_models", "sotopia_env.model_ref")


def module_files() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name, for its ``__init__.py``)."""
    modules = {}
    for folder, sub in FOLDERS.items():
        prefix = f"{PACKAGE}.{sub}" if sub else PACKAGE
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            name = ".".join((prefix, *parts)).removesuffix(".__init__")
            if not sub and parts[0] in FOLDERS:  # a folder mapped to a subpackage of its own is not this one's
                continue
            modules[name] = path
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import under ``node`` (functions and classes included), except those under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            yield from (n for branch in child.orelse for n in _import_nodes_of(branch))
            continue
        yield from _import_nodes_of(child)


def _import_nodes_of(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    yield from _import_nodes(node)


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that module ``name`` imports: ``from pkg import sub`` is ``pkg.sub`` when that is a
    module, else ``pkg``; a relative import is resolved against ``name``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        for target in targets:
            while target and target not in modules:  # ``import a.b.c`` of a name that is not a module: its module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def front_door_targets() -> set[str]:
    """The modules the front door loads lazily (its ``_LAZY`` table: name -> module)."""
    import sotopia_env

    return set(sotopia_env._LAZY.values())


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports; the front door's lazy loads included."""
    modules = module_files()
    graph = {name: imports_of(name, path, modules) for name, path in modules.items()}
    graph[PACKAGE] |= front_door_targets()
    return graph


def layer_of(module: str) -> int:
    if any(module == f or module.startswith(f"{f}.") for f in FOUNDATION):
        return LAYERS.index("backends")
    parts = module.split(".")
    return LAYERS.index(parts[1] if len(parts) > 1 and parts[1] in LAYERS else PACKAGE)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected set of more than one module (Tarjan), as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_scan_sees_every_layer_and_resolves_imports():
    graph = import_graph()
    assert len(graph) == sum(len(list((REPO / folder).rglob("*.py"))) for folder in FOLDERS)  # one per file
    assert {LAYERS[layer_of(m)] for m in graph} == set(LAYERS)
    assert {"sotopia_env.episodes.log", "sotopia_env.agents.loading"} <= graph["sotopia_env.episodes.runner"]
    assert "sotopia_env.training.rl.tasks" in graph["sotopia_env.training.grpo"]  # a module-level import
    assert "sotopia_env.training.config" in graph["sotopia_env.cli.train_cmds"]  # imports inside functions
    assert "sotopia_env.backends.local" in graph["sotopia_env.backends.resolve"]


def test_the_scan_finds_a_circle_an_arrow_up_and_skips_type_checking(tmp_path):
    (tmp_path / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sotopia_env.cli import main\n"
        "def f():\n    from sotopia_env.b import x\n"
    )
    (tmp_path / "b.py").write_text("import sotopia_env.a\nfrom sotopia_env.training import sr\n")
    modules = {"sotopia_env.a": tmp_path / "a.py", "sotopia_env.b": tmp_path / "b.py"}
    modules |= {"sotopia_env.cli.main": tmp_path / "x", "sotopia_env.training.sr": tmp_path / "x"}
    graph = {name: imports_of(name, modules[name], modules) for name in ("sotopia_env.a", "sotopia_env.b")}
    assert graph == {"sotopia_env.a": {"sotopia_env.b"}, "sotopia_env.b": {"sotopia_env.a", "sotopia_env.training.sr"}}
    assert circles(graph) == [["sotopia_env.a", "sotopia_env.b"]]
    assert layer_of("sotopia_env.b") < layer_of("sotopia_env.training.sr")


def test_no_import_circles():
    assert circles(import_graph()) == []


def test_no_import_goes_up_the_layers():
    allowed = {(PACKAGE, target) for target in front_door_targets()}  # the front door's lazy names, and nothing else
    upward = sorted(
        (source, target)
        for source, targets in import_graph().items()
        for target in targets
        if layer_of(target) > layer_of(source) and (source, target) not in allowed
    )
    assert upward == []


def test_the_front_door_loads_its_names_lazily_and_only_from_the_world_and_episodes():
    import sotopia_env

    assert set(sotopia_env.__all__) == {"__version__", *sotopia_env._LAZY}
    assert {LAYERS[layer_of(target)] for target in front_door_targets()} == {"sotopia_env", "episodes"}
    heavy = ("torch", "transformers", "sotopia_env.env", "sotopia_env.episodes")
    code = (
        "import sys, sotopia_env\n"
        f"loaded = [m for m in {heavy!r} if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "from sotopia_env import SocialEnv, EnvConfig, AgentAction, load_library, sample_setup, make_evaluator\n"
        "from sotopia_env import run_episode, open_store\n"
        "from sotopia_env.episodes.runner import run_episode as defined\n"
        "assert run_episode is defined and 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
    with pytest.raises(ImportError, match="cannot import name 'nothing'"):
        from sotopia_env import nothing  # noqa: F401
