"""The import scan: no import circles between our modules, and no import that goes up the layers.

Every module of the package is parsed (``ast``); an import at module level or inside a function counts alike, an
import under ``if TYPE_CHECKING:`` does not (it never runs). An import by name counts as well: the string given to
``importlib.import_module`` or ``__import__`` (or to a Gymnasium ``entry_point=``), and the ``"pkg.mod:ATTR"``
strings of a module-level table (a tuple, list, set or dict) in a module that calls ``import_module``, as a
registry's built-in list is. The layers, lowest first (``CONTRIBUTING.md``):

- the LLM backends (``sotopia_env.backends`` and the model helpers they use: ``errors``, ``embedded_models``,
  ``model_ref``), which know nothing of scenarios, prompts or the env;
- the rest of ``sotopia_env`` (the world), then ``agents``, ``episodes``, ``training``, ``server``, ``cli``.

A module may import its own layer and the ones below, never one above. The one documented exception is the front
door, ``sotopia_env/__init__.py``: its ``__getattr__`` (PEP 562) loads each name of its ``_LAZY`` table on first
use, some of them from ``agents/`` and ``episodes/``. Those loads are edges of the graph here (for circles), and
the only arrows up allowed are the ones ``FRONT_DOOR_UP`` below lists, name by name: a new front-door name that
comes from above the world is refused until it is added there, and none may come from above ``episodes/``.
"""

from __future__ import annotations

import ast
import re
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
FOUNDATION += ("sotopia_env.specs",)  # the typed model and evaluator specs the backends take
# the front door's names that come from above the world (``sotopia_env._LAZY``): each one is an allowed arrow up
FRONT_DOOR_UP = {
    "Agent": "sotopia_env.agents.base",
    "LLMAgent": "sotopia_env.agents.llm",
    "EpisodeLog": "sotopia_env.episodes.log",
    "Job": "sotopia_env.episodes.runner",
    "run_episode": "sotopia_env.episodes.runner",
    "open_store": "sotopia_env.episodes.store",
}
HIGHEST_FRONT_DOOR_LAYER = "episodes"
IMPORTERS = ("import_module", "__import__")  # the calls that import a module named by a string
MODULE_STRING = re.compile(r"^[A-Za-z_][\w.]*(:[\w.]+)?$")  # "pkg.mod" or "pkg.mod:ATTR"


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


def _nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` (functions and classes included), except those under ``if TYPE_CHECKING:``."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for branch in child.orelse:
                yield branch
                yield from _nodes(branch)
            continue
        yield child
        yield from _nodes(child)


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement under ``node``, except those under ``if TYPE_CHECKING:``."""
    return (n for n in _nodes(node) if isinstance(n, ast.Import | ast.ImportFrom))


def _is_importer(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Name) and func.id in IMPORTERS) or (
        isinstance(func, ast.Attribute) and func.attr in IMPORTERS
    )


def _module_strings(values: Iterator[ast.AST]) -> list[str]:
    """The strings among ``values`` that name a module of the package (``pkg.mod``, ``pkg.mod:ATTR``): the
    module part."""
    found = []
    for value in values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str) and MODULE_STRING.match(value.value):
            module = value.value.partition(":")[0]
            if module == PACKAGE or module.startswith(f"{PACKAGE}."):
                found.append(module)
    return found


def _table_values(value: ast.AST) -> list[ast.AST]:
    if isinstance(value, ast.Tuple | ast.List | ast.Set):
        return list(value.elts)
    if isinstance(value, ast.Dict):
        return [*(key for key in value.keys if key is not None), *value.values]
    return []


def string_imports(tree: ast.Module) -> list[str]:
    """The modules ``tree`` imports by name: the string argument of ``import_module``/``__import__`` and of a
    Gymnasium ``entry_point=``, and, in a module that calls ``import_module``/``__import__`` at all, the module
    strings of its module-level tables (a registry's built-in list: ``BUILTIN = ("pkg.mod:KIND", ...)``)."""
    calls = [n for n in _nodes(tree) if isinstance(n, ast.Call)]
    found = []
    for call in calls:
        if _is_importer(call) and call.args:
            found += _module_strings(iter(call.args[:1]))
        found += _module_strings(kw.value for kw in call.keywords if kw.arg == "entry_point")
    if any(_is_importer(call) for call in calls):
        for statement in tree.body:
            if isinstance(statement, ast.Assign | ast.AnnAssign) and statement.value is not None:
                found += _module_strings(iter(_table_values(statement.value)))
    return found


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ours that module ``name`` imports: ``from pkg import sub`` is ``pkg.sub`` when that is a
    module, else ``pkg``; a relative import is resolved against ``name``; imports by name (``string_imports``)
    included."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    by_name = string_imports(tree)
    found = set()
    for target in by_name:
        while target and target not in modules:  # "pkg.mod.Class": its module
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)
    for node in _import_nodes(tree):
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


def import_graph(replace: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports; the front door's lazy loads included. ``replace`` reads some
    modules from other files (a test's planted copy)."""
    modules = module_files() | (replace or {})
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


def arrows_up(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Each import from a module to a module of a higher layer, except the front door's listed names."""
    allowed = {(PACKAGE, target) for target in FRONT_DOOR_UP.values()}
    return sorted(
        (source, target)
        for source, targets in graph.items()
        for target in targets
        if layer_of(target) > layer_of(source) and (source, target) not in allowed
    )


def test_no_import_goes_up_the_layers():
    assert arrows_up(import_graph()) == []


def test_the_scan_reads_imports_by_name(tmp_path):
    """``import_module``/``__import__`` strings and a registry's built-in table are edges; other strings are not."""
    (tmp_path / "a.py").write_text(
        "import importlib\nGROUP = 'sotopia_env.b'\nBUILTIN = ('sotopia_env.b:KIND',)\n"
        "def load():\n    for target in BUILTIN:\n        importlib.import_module(target.partition(':')[0])\n"
    )
    (tmp_path / "b.py").write_text("def f():\n    return __import__('sotopia_env.a').a\n")
    (tmp_path / "c.py").write_text("GROUP = 'sotopia_env.a'\nNAMES = ('sotopia_env.a:KIND',)\n")
    (tmp_path / "d.py").write_text("from importlib import import_module\nimport_module('sotopia_env.cli.main.app')\n")
    modules = {f"sotopia_env.{n}": tmp_path / f"{n}.py" for n in "abcd"} | {"sotopia_env.cli.main": tmp_path / "x"}
    graph = {name: imports_of(name, modules[name], modules) for name in modules if name != "sotopia_env.cli.main"}
    assert graph == {
        "sotopia_env.a": {"sotopia_env.b"},
        "sotopia_env.b": {"sotopia_env.a"},
        "sotopia_env.c": set(),  # strings that no import_module reads are no imports
        "sotopia_env.d": {"sotopia_env.cli.main"},
    }
    assert circles(graph) == [["sotopia_env.a", "sotopia_env.b"]]
    assert arrows_up(graph) == [("sotopia_env.d", "sotopia_env.cli.main")]


def test_a_planted_import_by_name_fails_the_guard(tmp_path):
    """The real ``prompt.py`` with one line added, ``import_module("sotopia_env.cli.main")``: an arrow up (the
    world loading the CLI) and a circle (the CLI imports the world back)."""
    planted = tmp_path / "prompt.py"
    source = (REPO / "sotopia_env" / "prompt.py").read_text()
    planted.write_text(
        f'{source}\n\ndef _planted():\n    import importlib\n\n    importlib.import_module("sotopia_env.cli.main")\n'
    )
    graph = import_graph({"sotopia_env.prompt": planted})
    assert set(arrows_up(graph)) - set(arrows_up(import_graph())) == {("sotopia_env.prompt", "sotopia_env.cli.main")}
    assert any({"sotopia_env.prompt", "sotopia_env.cli.main"} <= set(circle) for circle in circles(graph))


def test_a_front_door_name_from_above_the_world_is_listed_here():
    """Every name of ``_LAZY`` that a higher layer defines is one of ``FRONT_DOOR_UP`` (name and module), and none
    comes from above ``episodes/``: a new one is refused until this test lists it."""
    import sotopia_env

    up = {name: module for name, module in sotopia_env._LAZY.items() if layer_of(module) > layer_of(PACKAGE)}
    assert up == FRONT_DOOR_UP
    assert max(layer_of(module) for module in FRONT_DOOR_UP.values()) <= LAYERS.index(HIGHEST_FRONT_DOOR_LAYER)


def test_every_front_door_name_has_a_docstring():
    """Each name of ``sotopia_env.__all__`` is documented where it is defined: a class by its own docstring (not a
    dataclass's generated signature, not a base class's), a function by its docstring."""
    import inspect
    import textwrap

    import sotopia_env

    missing = []
    for name in sotopia_env.__all__:
        if name == "__version__":
            continue
        value = getattr(sotopia_env, name)
        if isinstance(value, type):
            node = ast.parse(textwrap.dedent(inspect.getsource(value))).body[0]
            doc = ast.get_docstring(node) if isinstance(node, ast.ClassDef) else None
        else:
            doc = value.__doc__
        if not (doc or "").strip():
            missing.append(name)
    assert missing == []


def test_the_front_door_loads_its_names_lazily_and_only_from_the_world_agents_and_episodes():
    import sotopia_env

    assert set(sotopia_env.__all__) == {"__version__", *sotopia_env._LAZY}
    assert {LAYERS[layer_of(target)] for target in front_door_targets()} <= {
        "backends",
        "sotopia_env",
        "agents",
        "episodes",
    }
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
