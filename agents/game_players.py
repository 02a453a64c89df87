"""Rule players for games (agent spec ``rule-player``): deterministic, no LLM, so tests and baselines need none.

``RulePlayer`` reads its seat at reset and asks the game's rule set for that seat's player
(``sotopia_env.games.master.GameRules.player``); each rule set's module says how its players play
(``sotopia_env.games.werewolf``, ``undercover``, ``negotiation``). On its turn the player makes a choice when the
phase offers choices (a vote, a split, an answer), else says its line.
"""

from __future__ import annotations

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.errors import UserError
from sotopia_env.games.players import GamePlayer
from sotopia_env.kinds import rule_set
from sotopia_env.kinds.base import GAME
from sotopia_env.observation import Observation


class NotAGame(UserError, ValueError):
    """``rule-player`` took a seat in a scenario that is not a game."""


class RulePlayer:
    """Plays any registered game by its rules."""

    model = "rule-player"

    def __init__(self) -> None:
        self.player: GamePlayer | None = None

    def reset(self, setup: EpisodeSetup | None = None, seat: int | None = None) -> None:
        if setup is None or seat is None:
            return
        game = setup.scenario.game
        if game is None:
            raise NotAGame(f"rule-player: scenario {setup.scenario.id!r} is not a game (it has no 'game' section)")
        self.player = rule_set(game.rules, GAME).player(game, setup.agent_names, seat)

    async def act(self, observation: Observation) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn or self.player is None:
            return AgentAction(action_type=ActionType.none)
        if obs.choices:
            return AgentAction(action_type=ActionType.action, argument=self.player.choose(obs))
        return AgentAction(action_type=ActionType.speak, argument=self.player.say(obs))
