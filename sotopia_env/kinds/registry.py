"""The registry of rule sets: every verifiable kind and every game's rule set, by name.

A rule set gets in three ways, all loaded on first use:

- built in (``BUILTIN``): the kinds ``bargaining``, ``scheduling``, ``persuasion`` and ``split``
  (``sotopia_env.kinds``) and the games' ``werewolf``, ``undercover`` and ``negotiation`` (``sotopia_env.games``);
- an installed package's entry point in the group ``sotopia_env.kinds`` (``toy = my_package.toy:KIND``), so
  the CLI, configs and stored episodes find it;
- ``register_kind(KIND)`` from Python, before the scenarios that name it are loaded.

Scenario YAML names a kind by its name (``verifiable: {kind: bargaining, ...}``) and a game its rule set
(``game: {rules: werewolf, ...}``); ``validate_facts`` checks the facts against the registered kinds' models, so a
mistake is one line naming file, entry and field, as before.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable
from functools import lru_cache
from importlib.metadata import entry_points
from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter

from sotopia_env.errors import UserError
from sotopia_env.kinds.base import GAME, VERIFIABLE, Kind, RuleSet, VerifiableFacts

ENTRY_POINT_GROUP = "sotopia_env.kinds"
BUILTIN = (
    "sotopia_env.kinds.bargaining:KIND",
    "sotopia_env.kinds.scheduling:KIND",
    "sotopia_env.kinds.persuasion:KIND",
    "sotopia_env.kinds.split:KIND",
    "sotopia_env.games.werewolf:RULES",
    "sotopia_env.games.undercover:RULES",
    "sotopia_env.games.negotiation:RULES",
)
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")

_registered: dict[str, RuleSet] = {}
_loaded = False


class KindError(UserError, ValueError):
    """A rule set that cannot be registered or found; the message names it."""


class NotVerifiable(UserError, ValueError):
    """A scenario without hidden facts where a verifiable one is needed."""


def _load_builtins_and_entry_points() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True  # first: a plugin module that registers itself on import finds the registry ready
    for target in BUILTIN:
        module, _, attr = target.partition(":")
        _add(getattr(importlib.import_module(module), attr), f"built-in {target}")
    for point in entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {point.name!r} ({point.value}, group {ENTRY_POINT_GROUP})"
        try:
            found = point.load()
        except Exception as exc:
            _loaded = False  # every later lookup says so again, rather than go on without it
            raise KindError(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
        _add(found, where)


def _add(rule_set: Any, where: str, replace: bool = False) -> RuleSet:
    if isinstance(rule_set, type):
        rule_set = rule_set()  # a class stands for its one instance
    if not isinstance(rule_set, RuleSet) or rule_set.section not in (VERIFIABLE, GAME):
        raise KindError(f"{where}: {rule_set!r} is not a rule set (a sotopia_env.kinds.Kind or a games' GameRules)")
    name = rule_set.name
    if not isinstance(name, str) or not _NAME.match(name):
        raise KindError(f"{where}: name {name!r} must be lower case letters, digits, '-' or '_'")
    if isinstance(rule_set, Kind):
        model = getattr(rule_set, "facts_model", None)
        if not (isinstance(model, type) and issubclass(model, VerifiableFacts)) or (
            model.model_fields["kind"].default != name
        ):
            raise KindError(
                f"{where}: facts_model must be a VerifiableFacts subclass with 'kind' defaulting to {name!r}"
            )
    known = _registered.get(name)
    if known is not None and type(known) is not type(rule_set) and not replace:
        taken = f"{type(known).__module__}.{type(known).__qualname__}"
        raise KindError(f"{where}: the name {name!r} is taken by {taken} (pass replace=True to replace it)")
    if known is None or replace:
        _registered[name] = rule_set
    return _registered[name]


def register_kind(rule_set: Any, replace: bool = False) -> Any:
    """Register a verifiable kind (a ``Kind`` instance, or its class) or a game's rule set under its ``name``;
    returns it. A name taken by another rule set is a ``KindError`` unless ``replace``."""
    _load_builtins_and_entry_points()
    return _add(rule_set, f"register_kind({type(rule_set).__name__})", replace)


def unregister_kind(name: str) -> None:
    """Forget the rule set ``name`` (a test's toy kind, say); a built-in one comes back on the next process."""
    _load_builtins_and_entry_points()
    _registered.pop(name, None)


def rule_sets(section: str | None = None) -> list[RuleSet]:
    """Every registered rule set (of one ``section``: ``verifiable`` or ``game``), sorted by name."""
    _load_builtins_and_entry_points()
    return [r for _, r in sorted(_registered.items()) if section is None or r.section == section]


def rule_set(name: str, section: str | None = None) -> Any:
    """The rule set registered as ``name`` (in ``section``, when given); ``KindError`` names the known ones."""
    _load_builtins_and_entry_points()
    found = _registered.get(name)
    if found is None or (section is not None and found.section != section):
        what = {VERIFIABLE: "verifiable kind", GAME: "game rule set"}.get(section or "", "kind or rule set")
        known = ", ".join(r.name for r in rule_sets(section))
        raise KindError(f"unknown {what} {name!r} (known: {known})")
    return found


def kind_for(facts: Any) -> Kind:
    """The kind of ``facts`` (a scenario's ``verifiable`` section)."""
    return rule_set(facts.kind, VERIFIABLE)


def validate_facts(value: Any) -> VerifiableFacts | None:
    """``value`` (a mapping, from YAML or a stored episode) as its kind's facts model; a facts model passes as it
    is. Errors are pydantic's, located at the field (``verifiable.bargaining.budget``)."""
    if value is None or isinstance(value, VerifiableFacts):
        return value
    models = tuple(kind.facts_model for kind in rule_sets(VERIFIABLE))
    return _facts_adapter(models).validate_python(value)


@lru_cache(maxsize=8)
def _facts_adapter(models: tuple[type[VerifiableFacts], ...]) -> TypeAdapter[Any]:
    if len(models) == 1:
        return TypeAdapter(models[0])
    return TypeAdapter(Annotated[Union[models], Field(discriminator="kind")])  # noqa: UP007 (a runtime tuple)


# -- a scenario's rules ------------------------------------------------------------------------------------------


def facts_of(scenario: Any) -> Any:
    """The scenario's hidden facts; ``NotVerifiable`` (one line, naming the scenario) when it has none."""
    if scenario.verifiable is None:
        raise NotVerifiable(
            f"scenario {scenario.id!r} is not verifiable (it has no 'verifiable' facts); "
            "pick one with --scenarios verifiable, or use another evaluator/partner"
        )
    return scenario.verifiable


def require_verifiable(scenarios: Iterable[Any], who: str) -> None:
    """Raise ``NotVerifiable`` naming the first scenario without hidden facts, for ``who`` (e.g. the partner)."""
    for scenario in scenarios:
        if scenario.verifiable is None:
            raise NotVerifiable(
                f"{who} needs verifiable scenarios, but {scenario.id!r} has no 'verifiable' facts "
                "(select them with --scenarios verifiable)"
            )


def rules_of(scenario: Any) -> tuple[RuleSet, Any]:
    """The rule set that judges ``scenario`` and the section it reads: a game's rules and its ``game`` section,
    else the kind of its ``verifiable`` facts; ``NotVerifiable`` for a scenario with neither."""
    if scenario.game is not None:
        return rule_set(scenario.game.rules, GAME), scenario.game
    facts = facts_of(scenario)
    return kind_for(facts), facts
