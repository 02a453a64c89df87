"""``SocialEnv``: a PettingZoo ``ParallelEnv`` in which characters pursue private goals.

Agents are keyed by character name. Each step takes one action per live agent
(``{"action_type": name or index, "argument": str}``, optionally ``"to": [names]``, an ``AgentAction`` or its
JSON text); actions of agents whose turn it is not are ignored. An addressed action (``to``) is observed by
its recipients and its author only; a ``to`` that names nobody, the author or someone absent is an invalid
action (an agent error). With three or more present, ``recipients`` in the observation lists who can be
addressed.

A scenario with a ``game`` section is a game (``sotopia_env.games``): its game master decides who acts (the
action order is its own), which action types each may take (``infos[agent]["action_mask"]``, an int8 vector
over ``ACTION_TYPES``, and ``infos[agent]["phase"]``) and which arguments (``choices`` in the observation), who
observes each move (team channels, private results), and when the game ends (``game_over``; ``max_turns``,
``stale_turns`` and leaving do not apply: its ``max_cycles`` bound it). Its announcements are turns of
``transcript.MODERATOR``. Eliminated players stay in ``agents`` until the end, acting never, so that
everyone gets the final reward.

Returns of ``step``, all dicts keyed by agent name:

- observations: members of ``observation_space(agent)``; see ``Observation``.
- rewards: 0.0 until the last step. On the last step, the evaluator's score on
  ``config.reward_dimension`` (``goal`` by default), or NaN when the episode
  could not be rated or no evaluator is set: never a silent 0.
- terminations: True for everyone when the episode ended on its own: all but
  one agent left (``everyone_left``), ``stale_turns`` consecutive turns of
  ``none`` (``stale``), an agent failed to act ``max_agent_errors`` times
  (``agent_error``: an error, not stale talk), or a game reached its end (``game_over``).
- truncations: True for everyone when ``max_turns`` is reached (``max_turns``).
- infos: ``acting`` (whether it was the agent's turn), ``agent_errors`` (the
  agent's count), ``last_error``; on the last step also ``termination_reason``
  and ``evaluation`` (the agent's scores with reasoning, plus ``success`` from judges that check an outcome,
  or ``{"error": ...}``).

Between steps, ``acting`` lists the agents whose turn it is (empty before
``reset`` and once the episode is over) and ``observe(agent)`` returns one
agent's current observation: the dict the last ``reset``/``step`` returned for it.

The env is synchronous and pure: same setup, seed and actions, same episode.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pettingzoo import ParallelEnv

from sotopia_env.actions import ACTION_TYPES, ActionType, AgentAction, InvalidAction, coerce_action
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.evaluators.base import EpisodeContext, EpisodeRating, Evaluator, evaluate_safely
from sotopia_env.games.master import GameMaster
from sotopia_env.games.outcome import Announcement
from sotopia_env.library import Library, load_library
from sotopia_env.limits import DEFAULT_MAX_TURNS
from sotopia_env.observation import SeatView
from sotopia_env.rewards import rating_reward
from sotopia_env.sampler import sample_setup
from sotopia_env.spaces import action_space, observation_space
from sotopia_env.transcript import MODERATOR, Turn

ActionOrder = Literal["round-robin", "simultaneous", "random"]
TERMINATION_REASONS = ("everyone_left", "stale", "agent_error", "max_turns", "game_over")
_NONE_ONLY = [ActionType.none.value]


@dataclass
class EnvConfig:
    max_turns: int = DEFAULT_MAX_TURNS
    action_order: ActionOrder = "round-robin"
    stale_turns: int = 4
    max_agent_errors: int = 1
    reward_dimension: str = "goal"

    def __post_init__(self) -> None:
        if self.action_order not in ("round-robin", "simultaneous", "random"):
            raise ValueError(f"action_order must be round-robin, simultaneous or random, not {self.action_order!r}")
        if self.max_turns < 1 or self.stale_turns < 1 or self.max_agent_errors < 1:
            raise ValueError("max_turns, stale_turns and max_agent_errors must be at least 1")


class SocialEnv(ParallelEnv):
    metadata = {"name": "sotopia_social_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(
        self,
        setup: EpisodeSetup | None = None,
        evaluator: Evaluator | None = None,
        config: EnvConfig | None = None,
        library: Library | None = None,
        render_mode: str | None = None,
    ) -> None:
        """``setup`` fixes scenario and characters; without it each ``reset`` samples one from ``library``."""
        self.config = config or EnvConfig()
        self.evaluator = evaluator
        self.render_mode = render_mode
        self._fixed_setup = setup
        self._library = library
        if setup is not None:
            setup.check()
        self.setup = setup or sample_setup(self._get_library(), seed=0)
        self.possible_agents = self.setup.agent_names
        self.agents: list[str] = []
        self.turns: list[Turn] = []
        self.termination_reason: str | None = None
        self.rating: EpisodeRating | None = None
        self._acting: list[str] = []
        self._views: list[SeatView] = []
        self.game: GameMaster | None = None

    # -- spaces -------------------------------------------------------------
    @functools.cache  # noqa: B019 - one space object per agent, as PettingZoo requires
    def observation_space(self, agent: str):  # type: ignore[override]
        game = self.setup.scenario.game
        return observation_space(self.config.max_turns if game is None else game.max_steps())

    @functools.cache  # noqa: B019
    def action_space(self, agent: str):  # type: ignore[override]
        return action_space()

    # -- episode ------------------------------------------------------------
    def _get_library(self) -> Library:
        if self._library is None:
            self._library = load_library()
        return self._library

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start an episode. ``options`` may hold ``setup`` (an EpisodeSetup) or ``scenario`` (an id)."""
        options = options or {}
        self._rng = random.Random(seed)
        if isinstance(options.get("setup"), EpisodeSetup):
            self.setup = options["setup"]
            self.setup.check()
        elif self._fixed_setup is None and (seed is not None or "scenario" in options):
            self.setup = sample_setup(self._get_library(), seed=seed, scenario=options.get("scenario"))
        elif self._fixed_setup is not None:
            self.setup = self._fixed_setup
        self.possible_agents = self.setup.agent_names
        self.agents = list(self.possible_agents)
        self._views = [SeatView.of(self.setup, seat) for seat in range(len(self.agents))]
        game = self.setup.scenario.game
        self.game = GameMaster(game, self.agents) if game is not None else None
        self.turns = []
        self.turn = 0
        self.present = list(self.agents)
        self._next_seat = 0
        self._stale = 0
        self.errors = dict.fromkeys(self.agents, 0)
        self._last_error: dict[str, str | None] = dict.fromkeys(self.agents, None)
        self.termination_reason = None
        self.rating = None
        if self.game is not None:
            self._announce(self.game.opening)
        self._acting = self._choose_acting()
        infos = {a: self._info(a) for a in self.agents}
        return self._observations(), infos

    def _info(self, agent: str) -> dict[str, Any]:
        info: dict[str, Any] = {
            "acting": agent in self._acting,
            "agent_errors": self.errors[agent],
            "last_error": self._last_error[agent],
        }
        if self.game is not None:  # PettingZoo-style: which action types this agent may take now
            kinds, _ = self.game.options(agent)
            info["action_mask"] = np.array([a in kinds for a in ACTION_TYPES], dtype="int8")
            info["phase"] = self.game.phase_name
        return info

    def _announce(self, said: list[Announcement]) -> None:
        for a in said:
            action = AgentAction(action_type=ActionType.speak, argument=a.text)
            self.turns.append(Turn(turn=self.turn, agent=MODERATOR, action=action, audience=a.audience))

    def _choose_acting(self) -> list[str]:
        if self.game is not None:
            return self.game.acting()
        order = self.config.action_order
        if order == "simultaneous":
            return list(self.present)
        if order == "random":
            return [self._rng.choice(self.present)]
        seats = self.possible_agents
        for offset in range(len(seats)):
            candidate = seats[(self._next_seat + offset) % len(seats)]
            if candidate in self.present:
                self._next_seat = (seats.index(candidate) + 1) % len(seats)
                return [candidate]
        return []

    @property
    def acting(self) -> list[str]:
        """The agents whose turn it is: their actions count in the next ``step``."""
        return list(self._acting)

    def observe(self, agent: str) -> dict[str, Any]:
        """``agent``'s current observation, as the last ``reset``/``step`` returned it."""
        if agent not in self.possible_agents:
            raise ValueError(f"no agent {agent!r} in this episode (agents: {', '.join(self.possible_agents)})")
        if not self._views:
            raise RuntimeError("observe() called before reset()")
        view = self._views[self.possible_agents.index(agent)]
        recipients = [view.labels[n] for n in self._recipients(agent)]
        if self.game is None:
            available = list(ACTION_TYPES) if agent in self._acting else _NONE_ONLY
            return view.observe(self.turns, self.turn, available, recipients)
        kinds, choices = self.game.options(agent)
        return view.observe(self.turns, self.turn, kinds, recipients, self.game.phase_name, choices)

    def _recipients(self, agent: str) -> list[str]:
        """Whom ``agent`` may address now: the others present, where there are two or more (a game: the living,
        in a phase open to all)."""
        if agent not in self._acting:
            return []
        if self.game is not None:
            return self.game.recipients(agent)
        others = [n for n in self.present if n != agent]
        return others if len(others) >= 2 else []

    def _problem(self, agent: str, action: AgentAction) -> str | None:
        """Why ``action`` is not a valid move for ``agent`` now (an addressee absent, a game's rules), or None."""
        if action.to is not None:
            allowed = self._recipients(agent)
            if not allowed and self.game is None:  # two present: the one other may be named too
                allowed = [n for n in self.present if n != agent]
            if not action.to:
                return "to: names nobody (leave it out to speak to everyone)"
            for who in action.to:
                if self._true_name(agent, who) not in allowed:
                    shown = ", ".join(allowed) or "nobody in this phase"
                    return f"to: {who!r} is not someone you can address now (you can address: {shown})"
        if self.game is not None:
            return self.game.problem(agent, action)
        return None

    def _true_name(self, agent: str, label: str) -> str:
        """The name behind a label as ``agent`` knows it ("person 3" for a stranger); a name stays itself."""
        labels = self._views[self.possible_agents.index(agent)].labels
        return next((name for name, known_as in labels.items() if known_as == label), label)

    def _addressed(self, agent: str, action: AgentAction) -> tuple[AgentAction, list[str] | None]:
        """The action with ``to`` as true names, and who observes it (None: everyone)."""
        if action.to:
            names = list(dict.fromkeys(self._true_name(agent, w) for w in action.to))
            return action.model_copy(update={"to": names}), [agent, *names]
        return action, None if self.game is None else self.game.audience(agent)

    def _observations(self) -> dict[str, dict[str, Any]]:
        return {name: self.observe(name) for name in self.possible_agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        all_none = True
        moves: dict[str, AgentAction] = {}
        for name in self._acting:
            if name not in actions:
                raise ValueError(f"turn {self.turn}: no action given for acting agent {name!r}")
            try:
                action = coerce_action(actions[name])
            except InvalidAction as exc:
                action = AgentAction.failed(f"invalid action: {exc}")
            problem = None if action.error else self._problem(name, action)
            if problem is not None:
                action = AgentAction.failed(f"invalid action: {problem}")
            action, audience = self._addressed(name, action)
            self._last_error[name] = action.error
            if action.error:
                self.errors[name] += 1
            self.turns.append(Turn(turn=self.turn, agent=name, action=action, audience=audience))
            moves[name] = action
            if action.action_type is ActionType.leave:
                self.present.remove(name)
            if action.action_type is not ActionType.none or action.error:
                all_none = False  # a failed action is an agent error, never stale talk
        if self.game is not None:
            self._announce(self.game.apply(moves))
        self._stale = self._stale + 1 if all_none else 0
        self.turn += 1

        reason = self._termination_reason()
        done = reason is not None
        self._acting = [] if done else self._choose_acting()
        agents = list(self.agents)
        rewards = dict.fromkeys(agents, 0.0)
        infos: dict[str, dict[str, Any]] = {a: self._info(a) for a in agents}
        if done:
            self.termination_reason = reason
            self.rating = self._evaluate(reason)
            for a in agents:
                reward = rating_reward(self.rating, a, self.config.reward_dimension)
                rewards[a] = float("nan") if reward is None else reward  # a float, as PettingZoo's rewards are
                infos[a]["termination_reason"] = reason
                infos[a]["evaluation"] = self._agent_evaluation(a)
        truncated = reason == "max_turns"
        terminations = dict.fromkeys(agents, done and not truncated)
        truncations = dict.fromkeys(agents, truncated)
        observations = self._observations()
        if done:
            self.agents = []
        if self.render_mode == "human":
            print(self.render())
        return observations, rewards, terminations, truncations, infos

    def _termination_reason(self) -> str | None:
        if any(n >= self.config.max_agent_errors for n in self.errors.values()):
            return "agent_error"
        if self.game is not None:  # a game ends by its rules; its max_cycles bound it
            return "game_over" if self.game.over else None
        if len(self.present) < 2:
            return "everyone_left"
        if self._stale >= self.config.stale_turns:
            return "stale"
        if self.turn >= self.config.max_turns:
            return "max_turns"
        return None

    def context(self) -> EpisodeContext:
        return EpisodeContext(setup=self.setup, turns=self.turns, termination_reason=self.termination_reason or "")

    def _evaluate(self, reason: str) -> EpisodeRating | None:
        if self.evaluator is None:
            return None
        self.termination_reason = reason
        return evaluate_safely(self.evaluator, self.context())  # the same call as episodes' rate step

    def _agent_evaluation(self, agent: str) -> dict[str, Any]:
        if self.rating is None:
            return {"error": "no evaluator configured"}
        if self.rating.ratings is None:
            return {"error": self.rating.error}
        rating = self.rating.of(agent)
        if rating is None:
            return {"error": (self.rating.unrated or {}).get(agent, "not rated")}
        success = {} if rating.success is None else {"success": rating.success}
        return {"overall": rating.overall, **success, **{k: v.model_dump() for k, v in rating.scores.items()}}

    def render(self) -> str:
        from sotopia_env.transcript import render_transcript

        return render_transcript(self.turns)

    def close(self) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {"turn": self.turn, "turns": [t.model_dump(mode="json") for t in self.turns]}
