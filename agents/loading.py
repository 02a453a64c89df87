"""Build an agent from a spec: a model, an alias, ``human``, ``rule-partner``, ``rule-player``,
``oracle-player`` (games), a verifiable kind's
``baseline-random``/``-heuristic``/``-oracle`` (``agents.baselines``) or ``module:Class``. The spec is read once
(``agents.specs.AgentSpec.parse``) and built by its kind's entry in the registry of agent kinds
(``agents.specs.register_agent_kind``); this module registers the two forms, ``module:Class`` and a model.

``module:Class`` resolves against the current folder first (as uvicorn's ``--app-dir .`` does), then against
folders given with ``add_agents_path`` (the CLI's ``--agents-path DIR``), then the installed packages. Only the
spec's own top-level name is taken from the user's folder: ours all live under ``sotopia_env``, so a user's
``agents/`` package works, and nothing of theirs can replace a module of ours. Ours are named in full
(``sotopia_env.training.experts:ScriptedExpert``); the names from before the one namespace are gone.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import sys
from collections.abc import Iterable
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType
from typing import Any

from sotopia_env.agents.base import Agent
from sotopia_env.agents.baselines import SPECS as BASELINE_SPECS
from sotopia_env.agents.specs import (
    CUSTOM,
    MODEL,
    NO_MODEL_SPECS,
    ORACLE_PLAYER,
    RULE_PARTNER,
    RULE_PLAYER,
    AgentSpec,
    AgentSpecError,
    agent_kind,
    agent_kind_names,
    register_agent_kind,
)
from sotopia_env.backends.base import GenerationSettings
from sotopia_env.backends.endpoints import ApiBase
from sotopia_env.errors import did_you_mean

__all__ = [
    "BASELINE_SPECS",
    "NO_MODEL_SPECS",
    "ORACLE_PLAYER",
    "RULE_PARTNER",
    "RULE_PLAYER",
    "AgentSpec",
    "AgentSpecError",
    "add_agents_path",
    "is_custom_spec",
    "load_agent",
    "load_custom_agent",
]


def is_custom_spec(spec: AgentSpec | str) -> bool:
    """Whether ``spec`` is a ``module:Class`` spec (``AgentSpec.is_custom``); False for one that is no spec."""
    try:
        return AgentSpec.parse(spec).is_custom
    except AgentSpecError:
        return False


_AGENT_FOLDERS: list[Path] = []  # --agents-path folders, searched after the current folder


def add_agents_path(folders: Iterable[str | Path]) -> None:
    """Search these folders for ``module:Class`` specs, after the current folder; each must exist."""
    for folder in folders:
        path = Path(folder).expanduser().resolve()
        if not path.is_dir():
            raise AgentSpecError(f"--agents-path {folder}: no such folder")
        if path not in _AGENT_FOLDERS:
            _AGENT_FOLDERS.append(path)


def _user_spec(top: str) -> tuple[Path, ModuleSpec] | None:
    """The user's own top-level module ``top``: in the current folder, else in an --agents-path folder."""
    for folder in (Path.cwd().resolve(), *_AGENT_FOLDERS):
        spec = PathFinder.find_spec(top, [str(folder)])
        if spec is not None:
            return folder, spec
    return None


def _import_user_module(module_name: str) -> ModuleType:
    """Import ``module_name`` the user's way: their folder's top-level module wins for that name alone.

    The folder is appended to ``sys.path`` (for the module's own later imports), never put first, so a user's
    ``training.py`` or ``episodes/`` cannot replace a module of ours or of any installed package.
    """
    top = module_name.partition(".")[0]
    found = _user_spec(top) if top != "sotopia_env" else None
    if found is not None:
        folder, spec = found
        loaded = sys.modules.get(top)
        if loaded is None or getattr(loaded, "__spec__", None) is None or loaded.__spec__.origin != spec.origin:
            module = importlib.util.module_from_spec(spec)
            sys.modules[top] = module
            try:
                spec.loader.exec_module(module)  # type: ignore[union-attr]
            except BaseException:
                sys.modules.pop(top, None)
                raise
        if str(folder) not in sys.path:
            sys.path.append(str(folder))
    return importlib.import_module(module_name)


def load_custom_agent(spec: AgentSpec | str, **kwargs: Any) -> Agent:
    """Import ``module:Class`` (the current folder first) and instantiate it with ``kwargs``."""
    spec = AgentSpec.parse(spec)
    if not spec.is_custom or spec.module is None or spec.attr is None:
        raise AgentSpecError(f"agent spec {spec.text!r}: not module:Class")
    module_name, attr = spec.module, spec.attr
    try:
        module = _import_user_module(module_name)
    except ModuleNotFoundError as exc:
        raise AgentSpecError(f"agent spec {spec.text!r}: module {exc.name!r} not found") from None
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise AgentSpecError(f"agent spec {spec.text!r}: importing {module_name} failed: {reason}") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise AgentSpecError(f"agent spec {spec.text!r}: module {module_name} has no attribute {attr!r}")
    try:
        agent = cls(**kwargs)
    except TypeError as exc:
        raise AgentSpecError(f"agent spec {spec.text!r}: cannot construct {attr}: {exc}") from None
    if not callable(getattr(agent, "act", None)):
        raise AgentSpecError(f"agent spec {spec.text!r}: {attr} has no act(observation) method")
    return agent


def load_agent(
    spec: AgentSpec | str,
    settings: GenerationSettings | None = None,
    api_base: ApiBase = None,
    api_key: str | None = None,
    constrained: bool = True,
    prompt: str | None = None,
    **backend_options: Any,
) -> Agent:
    """An agent for ``spec`` (an ``AgentSpec``, or a string parsed here once), built by its kind's registered
    build (``agents.specs``); model specs become an ``LLMAgent`` on a shared backend, prompted with ``prompt``
    (None: the model's own, ``LLMAgent``)."""
    spec = AgentSpec.parse(spec)
    options = {"api_base": api_base, "api_key": api_key, "constrained": constrained, "prompt": prompt}
    return agent_kind(spec.kind).build(spec, settings=settings, **options, **backend_options)


@register_agent_kind(CUSTOM)
def _custom(spec: AgentSpec, **_: Any) -> Agent:
    return load_custom_agent(spec)


@register_agent_kind(MODEL, calls_model=True)
def _llm(
    spec: AgentSpec,
    settings: GenerationSettings | None = None,
    api_base: ApiBase = None,
    api_key: str | None = None,
    constrained: bool = True,
    prompt: str | None = None,
    **backend_options: Any,
) -> Agent:
    """An ``LLMAgent`` on the shared backend of ``spec.model``."""
    from sotopia_env.agents.llm import LLMAgent
    from sotopia_env.backends.resolve import resolve_backend
    from sotopia_env.embedded_models import EMBEDDED_MODELS, UnknownModel

    try:
        backend = resolve_backend(spec.model or spec.text, api_base=api_base, api_key=api_key, **backend_options)
    except UnknownModel as exc:  # 'humna', 'rule-partnr': an agent's name misspelt reads as an unknown model
        names = agent_kind_names()
        if not difflib.get_close_matches(spec.text.strip().lower(), names, n=1, cutoff=0.6):
            raise
        hint = did_you_mean(spec.text, [*names, *EMBEDDED_MODELS])
        raise UnknownModel(
            f"agent spec {spec.text!r}: not {', '.join(names)}, module:Class or a model spec{hint}"
        ) from exc
    return LLMAgent(backend, settings=settings, constrained=constrained, prompt=prompt)
