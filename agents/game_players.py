"""Rule players for games (agent spec ``rule-player``): no LLM, so tests and baselines need none; seeded by the
episode, so the same episode replays the same game and other seeds play other games.

The games' baselines (issue #57) are two seats: the heuristic is ``rule-player`` (``RulePlayer``: the best short
script on what its seat observes, keeping no hidden role), and the oracle is ``oracle-player`` (``OraclePlayer``:
the same seat handed every player's role, ``GameRules.oracle_player``; the ceiling). ``benchmarks/game_baselines.py``
tables each role's win rate with either in its seats.

``RulePlayer`` reads its seat at reset and asks the game's rule set for that seat's player
(``sotopia_env.games.master.GameRules.player``); each rule set's module says how its players play
(``sotopia_env.games.werewolf``, ``undercover``, ``negotiation``). On its turn the player makes a choice when the
phase offers choices (a vote, a split, an answer), else says its line.
"""

from __future__ import annotations

from random import Random

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.errors import UserError
from sotopia_env.games.master import GameRules
from sotopia_env.games.players import GamePlayer, player_rng
from sotopia_env.games.spec import GameSpec
from sotopia_env.kinds import rule_set
from sotopia_env.kinds.base import GAME
from sotopia_env.observation import Observation


class NotAGame(UserError, ValueError):
    """``rule-player`` or ``oracle-player`` took a seat in a scenario that is not a game."""


class RulePlayer:
    """Plays any registered game by its rules."""

    model = "rule-player"

    def __init__(self) -> None:
        self.player: GamePlayer | None = None

    def reset(self, setup: EpisodeSetup | None = None, seat: int | None = None, seed: int | None = None) -> None:
        if setup is None or seat is None:
            return
        game = setup.scenario.game
        if game is None:
            raise NotAGame(f"{self.model}: scenario {setup.scenario.id!r} is not a game (it has no 'game' section)")
        rng = player_rng(seed, setup.pairing_key, seat)
        self.player = self.seat_player(rule_set(game.rules, GAME), game, setup.agent_names, seat, rng)

    def seat_player(self, rules: GameRules, game: GameSpec, names: list[str], seat: int, rng: Random) -> GamePlayer:
        """The rule set's rule player of ``seat``."""
        return rules.player(game, names, seat, rng)

    async def act(self, observation: Observation) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn or self.player is None:
            return AgentAction(action_type=ActionType.none)
        if obs.choices:
            return AgentAction(action_type=ActionType.action, argument=self.player.choose(obs))
        return AgentAction(action_type=ActionType.speak, argument=self.player.say(obs))


class OraclePlayer(RulePlayer):
    """Plays any registered game as its rule set's oracle (``GameRules.oracle_player``): the rule player of its
    seat, handed every player's role at reset. A ceiling for tables, never a partner to train against."""

    model = "oracle-player"

    def seat_player(self, rules: GameRules, game: GameSpec, names: list[str], seat: int, rng: Random) -> GamePlayer:
        return rules.oracle_player(game, names, seat, rng)
