"""Build an agent from a spec: a model, an alias, ``human``, ``rule-partner`` or ``module:Class``.

``module:Class`` resolves against the current folder first (as uvicorn's ``--app-dir .`` does), then against
folders given with ``add_agents_path`` (the CLI's ``--agents-path DIR``), then the installed packages.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agents.base import Agent
from sotopia_env.backends.base import GenerationSettings
from sotopia_env.errors import UserError

RULE_PARTNER = "rule-partner"
_CUSTOM = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class AgentSpecError(UserError, ValueError):
    """An agent spec that cannot be built; the message names the spec."""


def is_custom_spec(spec: str) -> bool:
    return bool(_CUSTOM.match(spec)) and not spec.startswith("local:")


def add_agents_path(folders: Iterable[str | Path]) -> None:
    """Put folders first on the import path for ``module:Class`` specs; each must exist."""
    for folder in reversed(list(folders)):
        path = Path(folder).expanduser().resolve()
        if not path.is_dir():
            raise AgentSpecError(f"--agents-path {folder}: no such folder")
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


def _current_folder_importable() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def load_custom_agent(spec: str, **kwargs: Any) -> Agent:
    """Import ``module:Class`` (the current folder first) and instantiate it with ``kwargs``."""
    module_name, _, attr = spec.partition(":")
    _current_folder_importable()
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise AgentSpecError(f"agent spec {spec!r}: module {exc.name!r} not found") from None
    except Exception as exc:
        reason = f"{type(exc).__name__}: {exc}"
        raise AgentSpecError(f"agent spec {spec!r}: importing {module_name} failed: {reason}") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise AgentSpecError(f"agent spec {spec!r}: module {module_name} has no attribute {attr!r}")
    try:
        agent = cls(**kwargs)
    except TypeError as exc:
        raise AgentSpecError(f"agent spec {spec!r}: cannot construct {attr}: {exc}") from None
    if not callable(getattr(agent, "act", None)):
        raise AgentSpecError(f"agent spec {spec!r}: {attr} has no act(observation) method")
    return agent


def load_agent(
    spec: str,
    settings: GenerationSettings | None = None,
    api_base: str | None = None,
    api_key: str | None = None,
    constrained: bool = True,
    **backend_options: Any,
) -> Agent:
    """An agent for ``spec``; model specs become an ``LLMAgent`` on a shared backend."""
    if spec == "human":
        from agents.human import HumanAgent

        return HumanAgent()
    if spec == RULE_PARTNER:
        from agents.rule_partners import RulePartner

        return RulePartner()
    if is_custom_spec(spec):
        return load_custom_agent(spec)
    from agents.llm import LLMAgent
    from sotopia_env.backends.resolve import resolve_backend

    backend = resolve_backend(spec, api_base=api_base, api_key=api_key, **backend_options)
    return LLMAgent(backend, settings=settings, constrained=constrained)
