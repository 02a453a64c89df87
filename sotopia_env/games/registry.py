"""The games' registry: every game's rule set (a ``GameRules``), by name.

A rule set gets in two ways (``sotopia_env.registry.Registry``, the style of every registry here):

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

from sotopia_env.kinds.base import GAME, KindError, RuleSet
from sotopia_env.registry import Registry, same_class

ENTRY_POINT_GROUP = "sotopia_env.games"


def _check_game(rules: Any, where: str) -> Any:
    if isinstance(rules, type):
        rules = rules()  # a class stands for its one instance
    if not isinstance(rules, RuleSet) or rules.section != GAME:
        raise KindError(f"{where}: {rules!r} is not a game's rule set (a sotopia_env.games.master.GameRules)")
    return rules


GAMES: Registry[Any] = Registry(
    "game rule set", ENTRY_POINT_GROUP, error=KindError, check=_check_game, name_of=lambda r: r.name, same=same_class
)


def add_game(rules: Any, where: str, replace: bool = False) -> Any:
    """Register ``rules`` (a ``GameRules`` instance, or its class), ``where`` naming its source in errors."""
    return GAMES.add(rules, where, replace=replace)


def register_game(rules: Any, replace: bool = False) -> Any:
    """Register a game's rule set (a ``GameRules`` instance, or its class) under its ``name``; returns it. A name
    taken by another rule set is a ``KindError`` unless ``replace``."""
    return add_game(rules, f"register_game({type(rules).__name__})", replace)


def unregister_game(name: str) -> None:
    """Forget the game rule set ``name`` (a test's toy game); a built-in one comes back on the next process."""
    GAMES.unregister(name)


def game_rule_sets() -> list[Any]:
    """Every registered game rule set, sorted by name (the entry points' included)."""
    return list(GAMES.values())


def game_rules(name: str) -> Any:
    """The game rule set registered as ``name``; ``KindError`` names the known ones."""
    return GAMES.lookup(name)
