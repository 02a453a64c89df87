"""An mkdocs hook: the reference pages are generated from the library when the site is built, so they cannot fall
behind the code. A page asks for a section with a line of its own, ``<!-- generated: NAME -->``:

- ``cli``: every command of ``sotopia-env`` (``typer.main.get_command(app)``), its arguments and every option with
  its type, default and help;
- ``api``: mkdocstrings directives for the front door (``sotopia_env.__all__``) and the classes a user meets next;
- ``dimensions``: SOTOPIA-EVAL's dimensions (``sotopia_env.evaluators.dimensions``) and the judge's instructions;
- ``catalogue``: every built-in scenario, by family, with its seats, relationship, split and tags;
- ``config``: the keys of a pipeline config (``training.config.PipelineConfig``) and of each registered trainer's
  config, with their types, defaults and the comments beside them in the source.

``tests/test_docs.py`` builds the site and checks that every option of every command and every exported name is
there.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority

BaseTrainConfig: Any = None  # set by config(), which imports the training layer
_MIRRORS: list[Path] = []
NAMESPACE_FOLDERS = ("agents", "episodes", "training", "server", "cli")  # pyproject.toml's package-dir
_MARKER = re.compile(r"^<!-- generated: (\w+) -->$", re.M)


@event_priority(100)  # before mkdocstrings' own on_config, which starts the handlers
def on_config(config: Any, **_: object) -> Any:
    """Point mkdocstrings at a mirror of the one namespace: griffe finds modules by folder, and ``agents/``,
    ``episodes/``, ``training/``, ``server/`` and ``cli/`` are ``sotopia_env.*`` only through setuptools'
    ``package-dir``. The mirror is a folder of symlinks in the temporary directory, made once per build."""
    plugin = config.plugins.get("mkdocstrings")
    if plugin is not None:
        handler = plugin.config["handlers"].setdefault("python", {})
        handler["paths"] = [str(_namespace_mirror()), *handler.get("paths", [])]
    return config


def _namespace_mirror() -> Path:
    import tempfile

    root = Path(__file__).resolve().parents[2]
    mirror = Path(tempfile.mkdtemp(prefix="sotopia-env-docs-")) / "sotopia_env"
    mirror.mkdir()
    for entry in (root / "sotopia_env").iterdir():
        (mirror / entry.name).symlink_to(entry)
    for folder in NAMESPACE_FOLDERS:
        (mirror / folder).symlink_to(root / folder)
    _MIRRORS.append(mirror.parent)
    return mirror.parent


def on_shutdown() -> None:
    """Remove the namespace mirrors this process made (a folder of symlinks each)."""
    import shutil

    for folder in _MIRRORS:
        shutil.rmtree(folder, ignore_errors=True)
    _MIRRORS.clear()


def on_page_markdown(markdown: str, **_: object) -> str:
    return _MARKER.sub(lambda m: _SECTIONS[m.group(1)](), markdown)


def _cell(text: Any) -> str:
    """Text for a table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: Any) -> str:
    text = " ".join(str(text).split()).replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


# -- the CLI ----------------------------------------------------------------------------------------------------


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    if path:
        yield path, cmd
    for name, sub in sorted(getattr(cmd, "commands", {}).items()) if path else getattr(cmd, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, (*path, name))


def _default(param: Any) -> str:
    default = param.default
    if default is None or param.required or type(default).__name__ in ("Sentinel", "_Missing", "UnsetType"):
        return ""
    if isinstance(default, (list, tuple)):
        return ", ".join(str(d) for d in default) if default else ""
    if getattr(param, "is_flag", False) and default is False:
        return "off"
    return _code(default)


def cli() -> str:
    import typer.main

    from sotopia_env.cli.main import app

    root = typer.main.get_command(app)
    out: list[str] = []
    for path, cmd in _commands(root):
        name = " ".join(path)
        out += [f"## `sotopia-env {name}`", ""]
        help_text = inspect.cleandoc(cmd.help or "")
        if help_text:
            out += [" ".join(help_text.split()), ""]
        if hasattr(cmd, "commands"):
            subs = ", ".join(f"[`{sub}`](#sotopia-env-{'-'.join((*path, sub))})" for sub in cmd.commands)
            out += [f"Commands: {subs}.", ""]
            continue
        ctx = cmd.make_context(name, [], resilient_parsing=True)
        args = [p for p in cmd.params if p.param_type_name == "argument"]
        options = [p for p in cmd.params if p.param_type_name == "option" and not p.hidden and p.name != "help"]
        usage = " ".join(["sotopia-env", name, *(p.name.upper() for p in args), "[OPTIONS]" if options else ""])
        out += [f"Usage: `{usage.strip()}`", ""]
        rows = ["| argument or option | type | default | what it does |", "| --- | --- | --- | --- |"]
        for p in args:
            rows.append(f"| `{p.name.upper()}` | {_code(p.display_type(ctx))} | | {_cell(p.help or '')} |")
        for p in options:
            names = ", ".join(f"`{o}`" for o in (*p.opts, *p.secondary_opts))
            repeat = " (repeatable)" if p.multiple else ""
            kind = "flag" if getattr(p, "is_flag", False) else _code(p.display_type(ctx))
            rows.append(f"| {names} | {kind}{repeat} | {_default(p)} | {_cell(p.help or '')} |")
        out += [*rows, ""]
    return "\n".join(out)


# -- the Python API ---------------------------------------------------------------------------------------------

# Beyond the front door: what a user of the Python API meets next, by page section.
API_MORE = {
    "Agents": [
        "sotopia_env.agents.base.Agent",
        "sotopia_env.agents.llm.LLMAgent",
        "sotopia_env.agents.loading.load_agent",
    ],
    "Profiles and the library": [
        "sotopia_env.profiles.Scenario",
        "sotopia_env.profiles.Character",
        "sotopia_env.library.Library",
        "sotopia_env.episode_setup.EpisodeSetup",
    ],
    "Evaluators": [
        "sotopia_env.evaluators.dimensions.Dimension",
        "sotopia_env.evaluators.base.EpisodeRating",
        "sotopia_env.evaluators.factory.register_evaluator",
    ],
    "Episodes": [
        "sotopia_env.episodes.log.EpisodeLog",
        "sotopia_env.episodes.runner.Job",
        "sotopia_env.episodes.runner.run_batch",
    ],
    "Backends": ["sotopia_env.backends.resolve.resolve_backend"],
}


def _directive(path: str) -> list[str]:
    """A mkdocstrings directive for ``path``, heading level 3."""
    return [f"::: {path}", "    options:", "      heading_level: 3", ""]


def api() -> str:
    import sotopia_env

    lazy: dict[str, str] = sotopia_env._LAZY
    out = ["## The front door: `from sotopia_env import ...`", ""]
    front = [f"{lazy[name]}.{name}" for name in sotopia_env.__all__ if name in lazy]
    for path in front:
        out += _directive(path)
    for section, paths in API_MORE.items():
        rest = [path for path in paths if path not in front]  # each name once: at the front door if it is there
        if rest:
            out += [f"## {section}", "", *(line for path in rest for line in _directive(path))]
    return "\n".join(out)


# -- the dimensions ---------------------------------------------------------------------------------------------


def dimensions() -> str:
    from sotopia_env.evaluators.dimensions import SOTOPIA_DIMENSIONS
    from sotopia_env.evaluators.llm import INSTRUCTIONS

    rows = ["| dimension | range | what the judge is asked |", "| --- | --- | --- |"]
    rows += [f"| `{d.name}` | {d.low} .. {d.high} | {_cell(d.description)} |" for d in SOTOPIA_DIMENSIONS]
    lows = sum(d.low for d in SOTOPIA_DIMENSIONS) / len(SOTOPIA_DIMENSIONS)
    highs = sum(d.high for d in SOTOPIA_DIMENSIONS) / len(SOTOPIA_DIMENSIONS)
    rows.append(f"| `overall` | {lows:.2f} .. {highs:.2f} | the mean of the seven (reports add it) |")
    quoted = "\n".join(f"> {line}" if line else ">" for line in INSTRUCTIONS.splitlines())
    return "\n".join(
        [*rows, "", "The LLM judge's instructions (`sotopia_env.evaluators.llm.INSTRUCTIONS`):", "", quoted]
    )


# -- the scenario catalogue -------------------------------------------------------------------------------------

FAMILIES = (  # (title, the tag that makes the family; None: the SOTOPIA-style talk scenarios)
    ("SOTOPIA-style scenarios", None),
    ("Verifiable scenarios", "verifiable"),
    ("Multi-party scenarios", "multi-party"),
    ("Games", "game"),
)


def catalogue() -> str:
    from sotopia_env.library import OPT_IN_TAGS, load_library

    lib = load_library()
    out = [
        f"{len(lib.scenarios)} scenarios and {len(lib.characters)} characters ship with the library "
        f"(`sotopia-env scenarios show ID` prints one in full, goals included).",
        "",
    ]
    for title, tag in FAMILIES:
        chosen = sorted(
            (
                s
                for s in lib.scenarios.values()
                if (tag in s.tags if tag else not set(OPT_IN_TAGS) & set(s.tags))
                and not (tag == "multi-party" and "game" in s.tags)
            ),
            key=lambda s: s.id,
        )
        out += [f"## {title} ({len(chosen)})", ""]
        out += ["| id | seats | relationship | split | tags | scenario |", "| --- | --- | --- | --- | --- | --- |"]
        for s in chosen:
            text = s.scenario if len(s.scenario) <= 160 else s.scenario[:157].rstrip() + "…"
            tags = ", ".join(t for t in s.tags if t != tag)
            out.append(f"| `{s.id}` | {s.num_agents} | {s.relationship.name} | {s.split} | {tags} | {_cell(text)} |")
        out.append("")
    return "\n".join(out)


# -- the config keys --------------------------------------------------------------------------------------------


def _comments(cls: type) -> dict[str, str]:
    """The ``# comment`` beside each field in ``cls``'s source (a comment on the lines just above counts too)."""
    try:
        lines = inspect.getsource(cls).splitlines()
    except (OSError, TypeError):
        return {}
    found: dict[str, str] = {}
    above: list[str] = []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# "))
            continue
        match = re.match(r"^\s+(\w+)\s*:\s*[^=]+?(?:=.*?)?(?:\s+#\s*(.*))?$", line)
        if match and not stripped.startswith(("def ", "@", "return")):
            comment = match.group(2) or " ".join(above)
            if comment:
                found.setdefault(match.group(1), comment)
        above = []
    return found


def _type_name(tp: Any) -> str:
    generic = typing.get_origin(tp) is not None
    text = tp if isinstance(tp, str) or generic else getattr(tp, "__name__", None) or str(tp)
    return re.sub(r"\b(typing|collections\.abc|sotopia_env(\.\w+)*)\.", "", str(text))


def _field_default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return _code(repr(f.default)) if f.default is not None else "`None`"
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        return "(a section)" if dataclasses.is_dataclass(value) else _code(repr(value))
    return "required"


def _config_table(cls: type, prefix: str, seen: dict[type, str]) -> list[str]:
    hints = typing.get_type_hints(cls) if cls.__module__ else {}
    comments = _comments(cls)
    doc = inspect.cleandoc(cls.__doc__ or "") if cls.__doc__ and not cls.__doc__.startswith(cls.__name__ + "(") else ""
    out = [f"### `{prefix or 'top level'}` ({cls.__name__})", ""]
    if doc:
        out += [" ".join(doc.split()), ""]
    out += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    nested: list[tuple[type, str]] = []
    for f in dataclasses.fields(cls):
        if f.name.startswith("_") or f.name == "source":
            continue
        tp = hints.get(f.name, f.type)
        out.append(
            f"| `{f.name}` | {_code(_type_name(tp))} | {_field_default(f)} | {_cell(comments.get(f.name, ''))} |"
        )
        for arg in (tp, *typing.get_args(tp)):
            if dataclasses.is_dataclass(arg) and isinstance(arg, type) and arg is not BaseTrainConfig:
                nested.append((arg, f"{prefix}.{f.name}" if prefix else f.name))
            elif isinstance(arg, type) and arg is BaseTrainConfig:  # ``rl:``: any registered trainer's config
                nested.append((arg, f"{prefix}.{f.name}" if prefix else f.name))
    out.append("")
    for sub, where in nested:
        if sub is BaseTrainConfig:
            out += [
                f"### `{where}`",
                "",
                "One registered trainer's config, chosen by its `task`: the trainers' sections below.",
                "",
            ]
        elif sub in seen:
            out += [f"### `{where}` ({sub.__name__})", "", f"The keys of `{seen[sub]}`.", ""]
        else:
            seen[sub] = where
            out += _config_table(sub, where, seen)
    return out


def config() -> str:
    global BaseTrainConfig
    from sotopia_env.training.base_config import BaseTrainConfig
    from sotopia_env.training.config import PipelineConfig
    from sotopia_env.training.trainers import TRAINERS

    out = ["## A pipeline config (`sotopia-env train pipeline CONFIG`)", ""]
    out += _config_table(PipelineConfig, "", {PipelineConfig: "top level"})
    for trainer in TRAINERS.values():
        tasks = ", ".join(f"`{t}`" for t in trainer.task_names())
        out += [f"## {trainer.title} (`sotopia-env train run CONFIG`, `task`: {tasks})", ""]
        out += _config_table(trainer.config, "", {trainer.config: "top level"})
    return "\n".join(out)


_SECTIONS: dict[str, Callable[[], str]] = {
    "cli": cli,
    "api": api,
    "dimensions": dimensions,
    "catalogue": catalogue,
    "config": config,
}
