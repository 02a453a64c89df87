"""``SocialEnv``: a PettingZoo ``ParallelEnv`` in which characters pursue private goals.

Agents are keyed by seat id: ``agent_0``, ``agent_1``, ... ``possible_agents`` is fixed for the env, as PettingZoo
requires: the most seats its episodes can have (a fixed setup's seat count; for an env that draws its episodes
from a library, the largest seat count among the scenarios it draws). ``agents`` after ``reset`` are the seats of
the episode, a prefix of ``possible_agents``. Who sits in a seat changes from episode to episode: the character's
name is ``infos[seat]["name"]`` and ``observations[seat]["agent"]`` (a game's role and team: ``infos[seat]["role"]``
and ``["team"]``), and ``name_of(seat)`` / ``seat_of(name)`` translate. The transcript (``turns``, ``Turn.agent``),
``errors``, the rating and a game's master keep character names, as stored episodes do, and so does addressing:
``to`` names the others as the character knows them.

Each step takes one action per live agent
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

Returns of ``step``, all dicts keyed by seat id:

- observations: members of ``observation_space(agent)``; see ``Observation``.
- rewards: 0.0 until the last step. On the last step, the evaluator's score on
  ``config.reward_dimension`` (``goal`` by default), or NaN when the episode
  could not be rated or no evaluator is set: never a silent 0.
- terminations: True for everyone when the episode ended on its own: all but
  one agent left (``everyone_left``), ``stale_turns`` consecutive turns of
  ``none`` (``stale``), an agent failed to act ``max_agent_errors`` times
  (``agent_error``: an error, not stale talk), or a game reached its end (``game_over``).
- truncations: True for everyone when ``max_turns`` is reached (``max_turns``).
- infos: ``name`` (the character in the seat), ``acting`` (whether it was the agent's turn), ``agent_errors``
  (the agent's count), ``last_error``; in a game ``role`` and ``team``; on the last step also ``termination_reason``
  and ``evaluation`` (the agent's scores with reasoning, plus ``success`` from judges that check an outcome,
  or ``{"error": ...}``).

Between steps, ``acting`` lists the seats whose turn it is (empty before
``reset`` and once the episode is over) and ``observe(seat)`` returns one
seat's current observation: the dict the last ``reset``/``step`` returned for it.

The env is synchronous and pure: same setup, seed and actions, same episode.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
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
from sotopia_env.profiles import Scenario
from sotopia_env.rewards import rating_reward
from sotopia_env.sampler import sample_setup
from sotopia_env.spaces import action_space, observation_space
from sotopia_env.transcript import MODERATOR, Turn

ActionOrder = Literal["round-robin", "simultaneous", "random"]
TERMINATION_REASONS = ("everyone_left", "stale", "agent_error", "max_turns", "game_over")
_NONE_ONLY = [ActionType.none.value]


def seat_id(index: int) -> str:
    """The PettingZoo agent id of seat ``index`` (0-based): ``agent_0``, ``agent_1``, ..."""
    return f"agent_{index}"


@dataclass
class EnvConfig:
    """How an episode runs: the turn limit, who acts when, when stale talk or a failing agent ends it, and which
    dimension of the judge's rating the last step's reward is. Every field has a default; a bad value is a
    ``ValueError`` at once."""

    max_turns: int = DEFAULT_MAX_TURNS  # the turn limit: reaching it truncates the episode (not a termination)
    action_order: ActionOrder = "round-robin"  # who acts each turn: round-robin, simultaneous or random
    stale_turns: int = 4  # this many turns in a row of only `none` end the episode as stale
    max_agent_errors: int = 1  # an agent that fails to act this many times ends the episode (agent_error)
    reward_dimension: str = "goal"  # the dimension of the judge's rating that the last step's reward is

    def __post_init__(self) -> None:
        if self.action_order not in ("round-robin", "simultaneous", "random"):
            raise ValueError(f"action_order must be round-robin, simultaneous or random, not {self.action_order!r}")
        if self.max_turns < 1 or self.stale_turns < 1 or self.max_agent_errors < 1:
            raise ValueError("max_turns, stale_turns and max_agent_errors must be at least 1")


class SocialEnv(ParallelEnv):
    """The social env, a PettingZoo ``ParallelEnv``: seats ``agent_0``, ``agent_1``, ... talk and act in turns in
    one scenario (a fixed ``setup``, or one drawn from ``library`` at each ``reset``).

    ``reset(seed, options)`` returns ``(observations, infos)``; ``step(actions)`` takes one ``AgentAction`` (or
    its dict) per acting seat and returns ``(observations, rewards, terminations, truncations, infos)``, dicts
    keyed by seat id. The turn limit truncates; everyone leaving, stale talk or an agent's errors terminate. The
    last step's reward is the evaluator's ``config.reward_dimension`` score (NaN when unrated), and
    ``infos[seat]["evaluation"]`` holds every dimension. Synchronous and pure: ``episodes`` drives it async.
    """

    metadata = {"name": "sotopia_social_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}

    def __init__(
        self,
        setup: EpisodeSetup | None = None,
        evaluator: Evaluator | None = None,
        config: EnvConfig | None = None,
        library: Library | None = None,
        render_mode: str | None = None,
        scenarios: str | Iterable[str] | None = None,
    ) -> None:
        """``setup`` fixes scenario and characters; without it each ``reset(seed=...)`` samples one from
        ``library``, among ``scenarios`` (a ``Library.select`` selector; default ``all``: the two-seat talk
        scenarios). The env's seats and spaces are those of the scenarios it can draw, fixed from here on."""
        self.config = config or EnvConfig()
        self.evaluator = evaluator
        self.render_mode = render_mode
        self._fixed_setup = setup
        self._library = library
        self._pool: list[Scenario] | None = None
        if setup is not None:
            if scenarios is not None:
                raise ValueError("give SocialEnv a setup or scenarios to draw from, not both")
            setup.check()
            drawn: Sequence[Scenario] = [setup.scenario]
        else:
            self._pool = drawn = self._get_library().select("all" if scenarios is None else scenarios)
            if not drawn:
                raise ValueError(f"no scenario in the library matches {scenarios!r}")
        self.setup = setup or sample_setup(self._get_library(), seed=0, among=self._pool)
        self.possible_agents = [seat_id(i) for i in range(max(s.num_agents for s in drawn))]
        self._max_steps = max(self._steps_of(s) for s in drawn)  # the observation space's bound on turns
        self._observation_spaces: dict[str, Any] = {}
        self._action_spaces: dict[str, Any] = {}
        self.agents: list[str] = []
        self.turns: list[Turn] = []
        self.termination_reason: str | None = None
        self.rating: EpisodeRating | None = None
        self._seat_names(self.setup)
        self._acting: list[str] = []  # names, as everything inside the env
        self._views: list[SeatView] = []
        self.game: GameMaster | None = None

    # -- seats --------------------------------------------------------------
    def _seat_names(self, setup: EpisodeSetup) -> None:
        self._names = setup.agent_names
        self._seats = self.possible_agents[: len(self._names)]
        self._seat_by_name = dict(zip(self._names, self._seats, strict=True))
        self._name_by_seat = dict(zip(self._seats, self._names, strict=True))

    def name_of(self, seat: str) -> str:
        """The name of the character in ``seat`` this episode (the one the last ``reset`` began)."""
        self._check_seat(seat)
        return self._name_by_seat[seat]

    def seat_of(self, name: str) -> str:
        """The seat id of the character called ``name`` this episode."""
        if name not in self._seat_by_name:
            raise ValueError(f"no character {name!r} in this episode (characters: {', '.join(self._names)})")
        return self._seat_by_name[name]

    def _check_seat(self, seat: str) -> None:
        if seat in self._name_by_seat:
            return
        if seat in self.possible_agents:
            raise ValueError(f"seat {seat!r} is empty in this episode (its seats: {', '.join(self._seats)})")
        hint = f"; {seat!r} sits in {self._seat_by_name[seat]!r} (env.seat_of)" if seat in self._seat_by_name else ""
        raise ValueError(f"no agent {seat!r}: agents are seat ids ({', '.join(self.possible_agents)}){hint}")

    def _steps_of(self, scenario: Scenario) -> int:
        """The most steps an episode of ``scenario`` can take (a game's by its rules, else ``max_turns``)."""
        return self.config.max_turns if scenario.game is None else scenario.game.max_steps()

    def _admit(self, setup: EpisodeSetup) -> None:
        """Refuse an episode that does not fit the env's seats or observation space (fixed for the env)."""
        s = setup.scenario
        if s.num_agents > len(self.possible_agents):
            raise ValueError(
                f"scenario {s.id!r} has {s.num_agents} seats; this env has {len(self.possible_agents)}"
                " (its possible_agents are fixed: make an env with this setup, or scenarios= that include it)"
            )
        if self._steps_of(s) > self._max_steps:
            raise ValueError(
                f"scenario {s.id!r} can take {self._steps_of(s)} steps; this env's observation space is bounded at"
                f" {self._max_steps} (make an env with this setup, or scenarios= that include it)"
            )

    # -- spaces -------------------------------------------------------------
    def observation_space(self, agent: str):  # type: ignore[override]
        """One space object per seat for the env's life, as PettingZoo requires (bounded by the longest episode
        the env can draw, whichever is drawn)."""
        if agent not in self._observation_spaces:
            if agent not in self.possible_agents:
                raise ValueError(f"no agent {agent!r}: agents are seat ids ({', '.join(self.possible_agents)})")
            self._observation_spaces[agent] = observation_space(self._max_steps)
        return self._observation_spaces[agent]

    def action_space(self, agent: str):  # type: ignore[override]
        if agent not in self._action_spaces:
            if agent not in self.possible_agents:
                raise ValueError(f"no agent {agent!r}: agents are seat ids ({', '.join(self.possible_agents)})")
            self._action_spaces[agent] = action_space()
        return self._action_spaces[agent]

    # -- episode ------------------------------------------------------------
    def _get_library(self) -> Library:
        if self._library is None:
            self._library = load_library()
        return self._library

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        """Start an episode. ``options`` may hold ``setup`` (an EpisodeSetup) or ``scenario`` (an id); either must
        fit the env's seats and observation space."""
        options = options or {}
        self._rng = random.Random(seed)
        if isinstance(options.get("setup"), EpisodeSetup):
            setup = options["setup"]
            setup.check()
        elif self._fixed_setup is None and (seed is not None or "scenario" in options):
            setup = sample_setup(self._get_library(), seed=seed, scenario=options.get("scenario"), among=self._pool)
        elif self._fixed_setup is not None:
            setup = self._fixed_setup
        else:
            setup = self.setup
        setup = setup.drawn_with(seed)  # a verifiable scenario's hidden type, per episode (already drawn: kept)
        self._admit(setup)
        self.setup = setup
        self._seat_names(setup)
        self.agents = list(self._seats)
        names = self._names
        self._views = [SeatView.of(setup, seat) for seat in range(len(names))]
        game = setup.scenario.game
        self.game = GameMaster(game, names) if game is not None else None
        self.turns = []
        self.turn = 0
        self.present = list(names)
        self._next_seat = 0
        self._stale = 0
        self.errors = dict.fromkeys(names, 0)  # by character name, as EpisodeLog.agent_errors
        self._last_error: dict[str, str | None] = dict.fromkeys(names, None)
        self.termination_reason = None
        self.rating = None
        if self.game is not None:
            self._announce(self.game.opening)
        self._acting = self._choose_acting()
        infos = {self._seat_by_name[n]: self._info(n) for n in names}
        return self._observations(), infos

    def _info(self, name: str) -> dict[str, Any]:
        info: dict[str, Any] = {
            "name": name,
            "acting": name in self._acting,
            "agent_errors": self.errors[name],
            "last_error": self._last_error[name],
        }
        if self.game is not None:  # PettingZoo-style: which action types this agent may take now
            kinds, _ = self.game.options(name)
            info["action_mask"] = np.array([a in kinds for a in ACTION_TYPES], dtype="int8")
            info["phase"] = self.game.phase_name
            role = self.game.roles[name]
            info["role"], info["team"] = role.name, role.team
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
        seats = self._names
        for offset in range(len(seats)):
            candidate = seats[(self._next_seat + offset) % len(seats)]
            if candidate in self.present:
                self._next_seat = (seats.index(candidate) + 1) % len(seats)
                return [candidate]
        return []

    @property
    def acting(self) -> list[str]:
        """The seats whose turn it is: their actions count in the next ``step``."""
        return [self._seat_by_name[n] for n in self._acting]

    def observe(self, agent: str) -> dict[str, Any]:
        """The current observation of seat ``agent``, as the last ``reset``/``step`` returned it."""
        self._check_seat(agent)
        if not self._views:
            raise RuntimeError("observe() called before reset()")
        return self._observe(self._name_by_seat[agent])

    def _observe(self, agent: str) -> dict[str, Any]:
        view = self._views[self._names.index(agent)]
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
        labels = self._views[self._names.index(agent)].labels
        return next((name for name, known_as in labels.items() if known_as == label), label)

    def _addressed(self, agent: str, action: AgentAction) -> tuple[AgentAction, list[str] | None]:
        """The action with ``to`` as true names, and who observes it (None: everyone)."""
        if action.to:
            names = list(dict.fromkeys(self._true_name(agent, w) for w in action.to))
            return action.model_copy(update={"to": names}), [agent, *names]
        return action, None if self.game is None else self.game.audience(agent)

    def _observations(self) -> dict[str, dict[str, Any]]:
        return {self._seat_by_name[name]: self._observe(name) for name in self._names}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        """``actions`` keyed by seat id; returns dicts keyed by seat id."""
        if not self.agents:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        all_none = True
        moves: dict[str, AgentAction] = {}
        for name in self._acting:
            seat = self._seat_by_name[name]
            if seat not in actions:
                named = [k for k in actions if k in self._seat_by_name]
                hint = f" (actions are keyed by seat id, not name: env.seat_of({named[0]!r}))" if named else ""
                raise ValueError(f"turn {self.turn}: no action given for acting agent {seat!r} ({name}){hint}")
            try:
                action = coerce_action(actions[seat])
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
        infos: dict[str, dict[str, Any]] = {a: self._info(self._name_by_seat[a]) for a in agents}
        if done:
            self.termination_reason = reason
            self.rating = self._evaluate(reason)
            for a in agents:
                name = self._name_by_seat[a]
                reward = rating_reward(self.rating, name, self.config.reward_dimension)
                rewards[a] = float("nan") if reward is None else reward  # a float, as PettingZoo's rewards are
                infos[a]["termination_reason"] = reason
                infos[a]["evaluation"] = self._agent_evaluation(name)
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
