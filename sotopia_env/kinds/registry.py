"""The registry of rule sets: every verifiable kind by name and, through the games' own registry
(``sotopia_env.games.registry``), every game's rule set.

A kind gets in two ways, the style of every registry here (``sotopia_env.registry.Registry``: a call, plus an
entry-point group):

- ``KIND = register_kind(MyKind())`` at the bottom of its module. The built-in kinds (``bargaining``,
  ``scheduling``, ``persuasion``, ``split``) are imported by the package, ``sotopia_env.kinds``, which Python
  runs before any of its modules, this one included: they are registered before any lookup;
- an installed package's entry point in the group ``sotopia_env.kinds`` (``toy = my_package.toy:KIND``), loaded
  on the first lookup, so the CLI, configs and stored episodes find it.

A game's rule set registers in the games' registry (``register_game``, entry points in ``sotopia_env.games``);
``register_kind`` and the ``sotopia_env.kinds`` group pass one on there, as before. ``rule_set(name)`` finds
kinds and games alike; a kind and a game may not share a name (a lookup by that name says so). No module here
imports a kind's or a game's module: they import the registries, so there is no import circle.

Scenario YAML names a kind by its name (``verifiable: {kind: bargaining, ...}``) and a game its rule set
(``game: {rules: werewolf, ...}``); ``validate_facts`` checks the facts against the registered kinds' models, so a
mistake is one line naming file, entry and field, as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import Annotated, Any, Union

from pydantic import Field, TypeAdapter

from sotopia_env.errors import UserError
from sotopia_env.kinds.base import (
    GAME,
    RULE_SET_NAME,
    VERIFIABLE,
    Kind,
    KindError,
    RuleSet,
    VerifiableFacts,
)
from sotopia_env.registry import Registry, same_class

ENTRY_POINT_GROUP = "sotopia_env.kinds"


class NotVerifiable(UserError, ValueError):
    """A scenario without hidden facts where a verifiable one is needed."""


def _games() -> Any:
    """The games' registry, imported on use (by lookups only, never while a kind registers): the package
    ``sotopia_env.kinds`` imports this module and its built-in kinds, and the games' modules import
    ``sotopia_env.kinds.base`` (so that package) while they load."""
    from sotopia_env.games import registry

    return registry


def _check_kind(rule_set: Any, where: str) -> Kind:
    if isinstance(rule_set, type):
        rule_set = rule_set()  # a class stands for its one instance
    if not isinstance(rule_set, RuleSet) or rule_set.section != VERIFIABLE:
        raise KindError(f"{where}: {rule_set!r} is not a rule set (a sotopia_env.kinds.Kind or a games' GameRules)")
    name = rule_set.name
    if not isinstance(name, str) or not RULE_SET_NAME.match(name):
        raise KindError(f"{where}: name {name!r} must be lower case letters, digits, '-' or '_'")
    model = getattr(rule_set, "facts_model", None)
    if not (isinstance(model, type) and issubclass(model, VerifiableFacts)) or (
        model.model_fields["kind"].default != name
    ):
        raise KindError(f"{where}: facts_model must be a VerifiableFacts subclass with 'kind' defaulting to {name!r}")
    return rule_set  # type: ignore[return-value]


class _KindRegistry(Registry[Kind]):
    """The kinds' registry; a game's rule set (by a call or the ``sotopia_env.kinds`` group) goes on to the games'
    registry, as before the games had their own."""

    def add(self, item: Any, where: str, name: str | None = None, replace: bool = False) -> Any:
        if isinstance(item, type):
            item = item()  # a class stands for its one instance
        if isinstance(item, RuleSet) and item.section == GAME:  # a game's: the games' registry keeps it
            if item.name in self._items:
                raise KindError(f"{where}: the name {item.name!r} is taken by a verifiable kind")
            return _games().add_game(item, where, replace)
        return super().add(item, where, name, replace)


KINDS: Registry[Kind] = _KindRegistry(
    "verifiable kind",
    ENTRY_POINT_GROUP,
    error=KindError,
    check=_check_kind,
    name_of=lambda kind: kind.name,
    same=same_class,
)


def register_kind(rule_set: Any, replace: bool = False) -> Any:
    """Register a verifiable kind (a ``Kind`` instance, or its class) under its ``name``; returns it. A game's
    rule set is passed on to the games' registry (``sotopia_env.games.registry.register_game``). A name taken by
    another rule set is a ``KindError`` unless ``replace``."""
    return KINDS.add(rule_set, f"register_kind({type(rule_set).__name__})", replace=replace)


def unregister_kind(name: str) -> None:
    """Forget the kind ``name`` (a test's toy kind, say); a built-in one comes back on the next process."""
    KINDS.unregister(name)


def rule_sets(section: str | None = None) -> list[RuleSet]:
    """Every registered rule set (of one ``section``: ``verifiable`` or ``game``), sorted by name."""
    kinds: list[RuleSet] = list(KINDS.values()) if section != GAME else []
    games: list[RuleSet] = _games().game_rule_sets() if section != VERIFIABLE else []
    return sorted([*kinds, *games], key=lambda r: r.name)


def rule_set(name: str, section: str | None = None) -> Any:
    """The rule set registered as ``name`` (in ``section``, when given); ``KindError`` names the known ones."""
    KINDS.load_entry_points()
    found: Any = KINDS.get(name) if section != GAME else None
    if section != VERIFIABLE and name in _games().GAMES:
        if found is not None:
            raise KindError(f"the name {name!r} is both a verifiable kind and a game's rule set; register one of them")
        found = _games().game_rules(name)
    if found is None:
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
