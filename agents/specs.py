"""Agent specs, read once, and the registry of agent kinds.

``AgentSpec.parse`` is the only code that reads an agent spec string (the CLI's ``--agent1``, an HTTP body's
``agents``, a YAML config's ``partner``). A spec is, in this order:

- a registered kind's name (exact): ``human``, ``rule-partner``, ``rule-player``, ``oracle-player``,
  ``baseline-random``/``-heuristic``/``-oracle``, or one an installed package registers;
- ``module:Class`` (``CUSTOM``): a class of the user's, imported and instantiated (``agents.loading``);
- anything else: a model spec (``MODEL``; ``sotopia_env.specs.ModelSpec``), for an ``LLMAgent``.

Every kind, the two forms included, builds its agent through the registry (``agent_kind(name).build``); nothing
switches on a spec's text. A kind gets in the way every registry here does (a call, plus an entry-point group):

- ``register_agent_kind(name, build)``, or ``@register_agent_kind(name)`` on the build function, which is called as
  ``build(spec, **options)`` (``options``: what ``load_agent`` was given: ``settings``, ``api_base``, ...);
- an installed package's entry point in the group ``sotopia_env.agents`` (``my-bot = my_package.bots:MyBot``):
  a class or a function called with no arguments, under the entry point's name; loaded on the first parse.

``AGENT_KINDS`` is a ``sotopia_env.registry.Registry``, the style of every registry here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sotopia_env.agents.base import Agent
from sotopia_env.agents.baselines import SPECS as BASELINE_SPECS
from sotopia_env.registry import Registry
from sotopia_env.specs import LOCAL_PREFIX, ModelSpec, SpecError

ENTRY_POINT_GROUP = "sotopia_env.agents"
HUMAN = "human"
RULE_PARTNER = "rule-partner"
RULE_PLAYER = "rule-player"
ORACLE_PLAYER = "oracle-player"  # agents.game_players.OraclePlayer: a game seat handed every role
CUSTOM = "custom"  # the kind of a ``module:Class`` spec
MODEL = "model"  # the kind of a model spec
FORMS = (CUSTOM, MODEL)  # the kinds a spec has by its form, never by its text: the text 'model' is a model spec
_CUSTOM = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")

AgentBuild = Callable[..., Agent]  # build(spec, **options) -> an agent


class AgentSpecError(SpecError):
    """An agent spec that cannot be read or built; the message is one line and names the spec."""


@dataclass(frozen=True)
class AgentKind:
    """One kind of agent: how it is built (``build(spec, **options)``), whether it calls a model we resolve, and
    what was registered (a build function, an entry point's class)."""

    build: AgentBuild
    calls_model: bool = False
    source: Any = field(default=None, compare=False)


@dataclass(frozen=True)
class AgentSpec:
    """An agent spec, read once: its ``kind`` (a registered kind's name, ``CUSTOM`` or ``MODEL``), and for
    ``CUSTOM`` the ``module`` and ``attr`` to import, for ``MODEL`` the ``model``. ``str()`` is the text as
    given, which episodes store."""

    text: str
    kind: str
    model: ModelSpec | None = field(default=None, compare=False)
    module: str | None = None
    attr: str | None = None

    @classmethod
    def parse(cls, value: AgentSpec | ModelSpec | str) -> AgentSpec:
        """The agent ``value`` names (an ``AgentSpec`` is passed through, a ``ModelSpec`` is an LLM agent on it);
        ``AgentSpecError`` naming it for one that is no spec."""
        if isinstance(value, AgentSpec):
            return value
        if isinstance(value, ModelSpec):
            return cls(value.text, MODEL, value)
        if isinstance(value, str) and value not in FORMS and value in AGENT_KINDS:
            return cls(value, value)
        if isinstance(value, str) and _CUSTOM.match(value) and not value.startswith(LOCAL_PREFIX):
            module, _, attr = value.partition(":")
            return cls(value, CUSTOM, module=module, attr=attr)
        try:
            model = ModelSpec.parse(value)
        except SpecError as exc:
            raise AgentSpecError(str(exc).replace("model spec", "agent spec", 1)) from None
        return cls(model.text, MODEL, model)

    @property
    def calls_model(self) -> bool:
        """Whether the agent calls a model we resolve (an ``LLMAgent``); a custom class's own calls are its own."""
        return agent_kind(self.kind).calls_model

    @property
    def is_custom(self) -> bool:
        """A ``module:Class`` spec: code of the user's, imported when built."""
        return self.kind == CUSTOM

    def __str__(self) -> str:
        return self.text


def _check_kind(item: Any, where: str) -> AgentKind:
    """What the registry holds: an ``AgentKind``; a class or function (an entry point's) is one built with no
    arguments."""
    if isinstance(item, AgentKind):
        return item
    if callable(item):
        return AgentKind(_no_arguments(item), source=item)
    raise AgentSpecError(f"{where}: {item!r} is not a class or a function that makes an agent")


def _no_arguments(make: Callable[[], Agent]) -> AgentBuild:
    """An entry point's class or function as a build function: called with no arguments."""
    return lambda spec, **options: make()


def _same(known: AgentKind, new: AgentKind) -> bool:
    return known.source is new.source and known.calls_model == new.calls_model


AGENT_KINDS: Registry[AgentKind] = Registry(
    "agent kind", ENTRY_POINT_GROUP, error=AgentSpecError, check=_check_kind, same=_same
)


def register_agent_kind(
    name: str, build: AgentBuild | None = None, *, calls_model: bool = False, replace: bool = False
) -> Any:
    """Make ``name`` an agent kind: ``load_agent(name)`` calls ``build(spec, **options)``; returns ``build``.
    Without ``build``, a decorator: ``@register_agent_kind("my-bot")`` on the build function. A name taken by
    another kind is an ``AgentSpecError`` unless ``replace``; ``CUSTOM`` and ``MODEL`` are the two forms' kinds."""
    if build is None:
        return lambda build: register_agent_kind(name, build, calls_model=calls_model, replace=replace)
    AGENT_KINDS.register(name, AgentKind(build, calls_model, source=build), replace=replace)
    return build


def unregister_agent_kind(name: str) -> None:
    """Forget the agent kind ``name`` (a test's toy agent, say); a built-in one comes back on the next process."""
    AGENT_KINDS.unregister(name)


def agent_kind(name: str) -> AgentKind:
    """The registered kind ``name``; ``AgentSpecError`` (one line, naming the known ones) for one not registered."""
    return AGENT_KINDS.lookup(name)


def agent_kind_names(calls_model: bool | None = None) -> list[str]:
    """The names an agent spec may be (the forms ``CUSTOM`` and ``MODEL`` left out); only those that call a
    model (or only those that do not) for ``calls_model``."""
    return [
        name
        for name, kind in AGENT_KINDS.items()
        if name not in FORMS and (calls_model is None or kind.calls_model == calls_model)
    ]


@register_agent_kind(HUMAN)
def _human(spec: AgentSpec, **_: Any) -> Agent:
    from sotopia_env.agents.human import HumanAgent

    return HumanAgent()


@register_agent_kind(RULE_PARTNER)
def _rule_partner(spec: AgentSpec, **_: Any) -> Agent:
    from sotopia_env.agents.rule_partners import RulePartner

    return RulePartner()


@register_agent_kind(RULE_PLAYER)
def _rule_player(spec: AgentSpec, **_: Any) -> Agent:
    from sotopia_env.agents.game_players import RulePlayer

    return RulePlayer()


@register_agent_kind(ORACLE_PLAYER)
def _oracle_player(spec: AgentSpec, **_: Any) -> Agent:
    from sotopia_env.agents.game_players import OraclePlayer

    return OraclePlayer()


def _baseline(spec: AgentSpec, **_: Any) -> Agent:
    from sotopia_env.agents.baselines import load_baseline

    return load_baseline(spec.kind)


for _name in BASELINE_SPECS:
    register_agent_kind(_name, _baseline)

NO_MODEL_SPECS = frozenset({HUMAN, RULE_PARTNER, RULE_PLAYER, ORACLE_PLAYER, *BASELINE_SPECS})  # built in, no model
