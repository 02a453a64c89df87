"""The games' registry: every game's rule set (a ``GameRules``), by name.

A rule set gets in two ways:

- ``RULES = register_game(MyRules())`` at the bottom of its module. The built-in ones (``werewolf``,
  ``undercover``, ``negotiation``) are imported by the package, ``sotopia_env.games``, which Python runs before
  any of its modules, this one included: they are registered before any lookup;
- an installed package's entry point in the group ``sotopia_env.games`` (``mafia = my_package.mafia:RULES``),
  loaded on the first lookup, so the CLI, configs and stored episodes find it.

Scenario YAML names a game's rule set as before (``game: {rules: werewolf, ...}``). Nothing here imports a rule
set's module: they import this one (to register, and the engine to look a game's rules up), so the registry
sits below them and there is no import circle. ``sotopia_env.kinds.registry`` consults this one, so
``rule_set(name)`` finds kinds and games alike; a game and a kind may not share a name.
"""

from __future__ import annotations

from typing import Any

from sotopia_env.kinds.base import GAME, RULE_SET_NAME, KindError, RuleSet, load_entry_point_group

ENTRY_POINT_GROUP = "sotopia_env.games"

_registered: dict[str, Any] = {}
_loaded = False


def _load_entry_points() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True  # first: a plugin module that registers itself on import finds the registry ready
    try:
        load_entry_point_group(ENTRY_POINT_GROUP, add_game)
    except KindError:
        _loaded = False  # every later lookup says so again, rather than go on without it
        raise


def add_game(rules: Any, where: str, replace: bool = False) -> Any:
    """Register ``rules`` (a ``GameRules`` instance, or its class), ``where`` naming its source in errors."""
    if isinstance(rules, type):
        rules = rules()  # a class stands for its one instance
    if not isinstance(rules, RuleSet) or rules.section != GAME:
        raise KindError(f"{where}: {rules!r} is not a game's rule set (a sotopia_env.games.master.GameRules)")
    name = rules.name
    if not isinstance(name, str) or not RULE_SET_NAME.match(name):
        raise KindError(f"{where}: name {name!r} must be lower case letters, digits, '-' or '_'")
    known = _registered.get(name)
    if known is not None and type(known) is not type(rules) and not replace:
        taken = f"{type(known).__module__}.{type(known).__qualname__}"
        raise KindError(f"{where}: the name {name!r} is taken by {taken} (pass replace=True to replace it)")
    if known is None or replace:
        _registered[name] = rules
    return _registered[name]


def register_game(rules: Any, replace: bool = False) -> Any:
    """Register a game's rule set (a ``GameRules`` instance, or its class) under its ``name``; returns it. A name
    taken by another rule set is a ``KindError`` unless ``replace``."""
    return add_game(rules, f"register_game({type(rules).__name__})", replace)


def unregister_game(name: str) -> None:
    """Forget the game rule set ``name`` (a test's toy game); a built-in one comes back on the next process."""
    _registered.pop(name, None)


def game_rule_sets() -> list[Any]:
    """Every registered game rule set, sorted by name (the entry points' included)."""
    _load_entry_points()
    return [rules for _, rules in sorted(_registered.items())]


def game_rules(name: str) -> Any:
    """The game rule set registered as ``name``; ``KindError`` names the known ones."""
    _load_entry_points()
    found = _registered.get(name)
    if found is None:
        known = ", ".join(sorted(_registered))
        raise KindError(f"unknown game rule set {name!r} (known: {known})")
    return found
