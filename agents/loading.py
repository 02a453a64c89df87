"""Build an agent from a spec: a model, an alias, ``human``, ``rule-partner``, ``rule-player``,
``oracle-player`` (games), a verifiable kind's
``baseline-random``/``-heuristic``/``-oracle`` (``agents.baselines``) or ``module:Class``.

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
import re
import sys
from collections.abc import Iterable
from importlib.machinery import ModuleSpec, PathFinder
from pathlib import Path
from types import ModuleType
from typing import Any

from sotopia_env.agents.base import Agent
from sotopia_env.agents.baselines import SPECS as BASELINE_SPECS
from sotopia_env.agents.baselines import load_baseline
from sotopia_env.backends.base import GenerationSettings
from sotopia_env.backends.endpoints import ApiBase
from sotopia_env.errors import UserError, did_you_mean

RULE_PARTNER = "rule-partner"
RULE_PLAYER = "rule-player"
ORACLE_PLAYER = "oracle-player"  # agents.game_players.OraclePlayer: a game seat handed every role
NO_MODEL_SPECS = frozenset(
    {"human", RULE_PARTNER, RULE_PLAYER, ORACLE_PLAYER, *BASELINE_SPECS}
)  # agents that call no model
_CUSTOM = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class AgentSpecError(UserError, ValueError):
    """An agent spec that cannot be built; the message names the spec."""


def is_custom_spec(spec: str) -> bool:
    return bool(_CUSTOM.match(spec)) and not spec.startswith("local:")


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


def load_custom_agent(spec: str, **kwargs: Any) -> Agent:
    """Import ``module:Class`` (the current folder first) and instantiate it with ``kwargs``."""
    module_name, _, attr = spec.partition(":")
    try:
        module = _import_user_module(module_name)
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
    api_base: ApiBase = None,
    api_key: str | None = None,
    constrained: bool = True,
    prompt: str | None = None,
    **backend_options: Any,
) -> Agent:
    """An agent for ``spec``; model specs become an ``LLMAgent`` on a shared backend, prompted with ``prompt``
    (None: the model's own, ``LLMAgent``)."""
    if spec == "human":
        from sotopia_env.agents.human import HumanAgent

        return HumanAgent()
    if spec == RULE_PARTNER:
        from sotopia_env.agents.rule_partners import RulePartner

        return RulePartner()
    if spec == RULE_PLAYER:
        from sotopia_env.agents.game_players import RulePlayer

        return RulePlayer()
    if spec == ORACLE_PLAYER:
        from sotopia_env.agents.game_players import OraclePlayer

        return OraclePlayer()
    if spec in BASELINE_SPECS:
        return load_baseline(spec)
    if is_custom_spec(spec):
        return load_custom_agent(spec)
    from sotopia_env.agents.llm import LLMAgent
    from sotopia_env.backends.resolve import resolve_backend
    from sotopia_env.embedded_models import EMBEDDED_MODELS, UnknownModel

    try:
        backend = resolve_backend(spec, api_base=api_base, api_key=api_key, **backend_options)
    except UnknownModel as exc:  # 'humna', 'rule-partnr': an agent's name misspelt reads as an unknown model
        names = ["human", RULE_PARTNER, RULE_PLAYER, ORACLE_PLAYER, *BASELINE_SPECS]
        if not difflib.get_close_matches(spec.strip().lower(), names, n=1, cutoff=0.6):
            raise
        hint = did_you_mean(spec, [*names, *EMBEDDED_MODELS])
        raise UnknownModel(f"agent spec {spec!r}: not {', '.join(names)}, module:Class or a model spec{hint}") from exc
    return LLMAgent(backend, settings=settings, constrained=constrained, prompt=prompt)
