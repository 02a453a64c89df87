"""``GameMaster``: runs a game's phases over ``SocialEnv``'s steps, deterministically; ``GameRules``: what a
game's rule set implements.

The env asks the master who acts (``acting``), what each player may do (``options``), whether a move is allowed
(``problem``) and who observes a move (``audience``); it hands it each step's moves (``apply``) and records the
announcements it returns as turns of ``MODERATOR``. The rule set (``spec.rules``, from the games' registry,
``sotopia_env.games.registry``) resolves a phase's moves and decides the outcome.

Everything follows from the spec, the seat order and the moves: no randomness, so the same moves give the same
game, and ``replay`` rebuilds the game from a transcript (``GameRules.judge`` does).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from typing import ClassVar

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.games.outcome import Announcement, GameOutcome
from sotopia_env.games.players import GamePlayer, hidden_roles
from sotopia_env.games.registry import game_rules
from sotopia_env.games.spec import ALIVE, GameSpec, Phase, Role
from sotopia_env.kinds.base import GAME, Verdict
from sotopia_env.transcript import MODERATOR, Turn


class GameMaster:
    def __init__(self, spec: GameSpec, names: list[str]) -> None:
        if len(names) != len(spec.seats):
            raise ValueError(f"game has {len(spec.seats)} seats, got {len(names)} players")
        self.spec = spec
        self.names = list(names)
        self.roles: dict[str, Role] = {n: spec.role(i) for i, n in enumerate(names)}
        self.alive: list[str] = list(names)
        self.eliminated: list[str] = []
        self.cycle = 0  # 0-based: the cycle being played
        self.votes = 0
        self.outcome: GameOutcome | None = None
        self.rules: GameRules = game_rules(spec.rules).new_game()
        self._phase = -1
        self._queue: list[str] = []
        self._moves: dict[str, AgentAction] = {}
        self.opening = self._next_phase()

    # -- who, what, to whom ---------------------------------------------------------------------------------------
    @property
    def phase(self) -> Phase:
        return self.spec.phases[self._phase]

    @property
    def phase_name(self) -> str:
        """The phase being played; "" once the game is over."""
        return "" if self.over else self.phase.name

    @property
    def over(self) -> bool:
        return self.outcome is not None

    def team(self, name: str) -> list[str]:
        return [n for n in self.names if self.roles[n].team == self.roles[name].team]

    def actors(self, phase: Phase) -> list[str]:
        """The living players a phase lets act, in seat order."""
        return [
            n
            for n in self.alive
            if ALIVE in phase.actors or {self.roles[n].name, self.roles[n].team} & set(phase.actors)
        ]

    def acting(self) -> list[str]:
        if self.over:
            return []
        if self.phase.order == "round-robin":
            return self._queue[:1]
        return list(self._queue)

    def options(self, name: str) -> tuple[list[str], list[str]]:
        """(action types, argument choices) open to ``name`` now; (``["none"]``, []) when it is not its move."""
        if name not in self.acting():
            return [ActionType.none.value], []
        return [a.value for a in self.phase.actions], self.choices(name)

    def choices(self, name: str) -> list[str]:
        phase = self.phase
        if phase.choices is None:
            return []
        verb = f"{phase.verb} " if phase.verb else ""
        if phase.choices == "yes-no":
            return ["accept", "reject"]
        if phase.choices == "split":
            return [f"{verb}{split_text(s)}" for s in self.rules.splits(self)]
        return [f"{verb}{n}" for n in self.targets(name, phase)]

    def targets(self, name: str, phase: Phase) -> list[str]:
        if phase.choices == "alive":
            return list(self.alive)
        if phase.choices == "alive-others":
            return [n for n in self.alive if n != name]
        return [n for n in self.alive if n not in self.team(name)]  # alive-outside-team

    def recipients(self, name: str) -> list[str]:
        """Whom ``name`` may address privately now: the other living players, in a phase open to all."""
        if name not in self.acting() or self.phase.channel != "all" or self.phase.choices is not None:
            return []
        return [n for n in self.alive if n != name]

    def problem(self, name: str, action: AgentAction) -> str | None:
        """Why ``name`` may not make ``action`` now, or None."""
        kinds, choices = self.options(name)
        if action.action_type.value not in kinds:
            kind, allowed = action.action_type.value, ", ".join(kinds)
            return f"{kind!r} is not allowed in the {self.phase.name} phase (allowed: {allowed})"
        if choices and canonical(action.argument) not in {canonical(c) for c in choices}:
            shown = ", ".join(repr(c) for c in choices[:6]) + (", ..." if len(choices) > 6 else "")
            return f"argument {action.argument!r} is not a valid choice in the {self.phase.name} phase ({shown})"
        return None

    def audience(self, name: str) -> list[str] | None:
        """Who observes ``name``'s move in this phase (besides the judge); None: everyone."""
        if self.phase.channel == "team":
            return self.team(name)
        if self.phase.channel == "self":
            return [name]
        return None

    # -- moves ----------------------------------------------------------------------------------------------------
    def apply(self, moves: dict[str, AgentAction]) -> list[Announcement]:
        """One step's moves (those of ``acting()``; a failed move abstains). Returns what the game master says."""
        if self.over:
            return []
        for name in self.acting():
            self._moves[name] = moves.get(name) or AgentAction(action_type=ActionType.none)
        self._queue = self._queue[1:] if self.phase.order == "round-robin" else []
        if self._queue:
            return []
        said = self.rules.resolve(self, self.phase, self._moves)
        if self.phase.is_vote:
            self.votes += 1
        self._moves = {}
        return said + self._finish_or_continue()

    def picked(self, moves: dict[str, AgentAction]) -> dict[str, str]:
        """Player -> the player their choice names (abstentions and failed moves left out)."""
        out = {}
        verb = self.phase.verb.lower()
        for name, action in moves.items():
            if action.error or action.action_type is not ActionType.action:
                continue
            target = canonical(action.argument).removeprefix(verb).strip()
            match = [n for n in self.names if n.lower() == target]
            if match:
                out[name] = match[0]
        return out

    def eliminate(self, name: str) -> None:
        self.alive.remove(name)
        self.eliminated.append(name)

    def _finish_or_continue(self) -> list[Announcement]:
        ended = self.rules.outcome(self)
        if ended is not None:
            self.outcome = ended
            return [Announcement(f"The game is over. {ended.reasoning}")]
        return self._next_phase()

    def _next_phase(self) -> list[Announcement]:
        """Move to the next phase that has living actors; a new cycle past the last; time up past max_cycles."""
        for _ in range(len(self.spec.phases) * 2):
            self._phase += 1
            if self._phase == len(self.spec.phases):
                self._phase, self.cycle = 0, self.cycle + 1
                if self.cycle >= self.spec.max_cycles:
                    self.cycle -= 1
                    self.outcome = self.rules.time_up(self)
                    return [Announcement(f"Time is up. {self.outcome.reasoning}")]
            actors = self.actors(self.phase)
            if actors:
                self._queue = actors * self.phase.rounds if self.phase.order == "round-robin" else actors
                return [Announcement(self._phase_line())]
        raise RuntimeError("no phase has a living actor")  # unreachable: the rules end a game first

    def _phase_line(self) -> str:
        return f"Round {self.cycle + 1}, {self.phase.name} phase."  # who acts is in each one's observation


def replay(spec: GameSpec, names: list[str], turns: Iterable[Turn]) -> GameMaster:
    """The game master after the recorded players' turns (announcements are skipped: they are its own)."""
    master = GameMaster(spec, names)
    steps: dict[int, dict[str, AgentAction]] = {}
    for t in turns:
        if t.agent != MODERATOR:
            steps.setdefault(t.turn, {})[t.agent] = t.action
    for index in sorted(steps):
        if master.over:
            break
        master.apply({n: a for n, a in steps[index].items() if n in master.acting()})
    return master


def split_text(split: dict[str, int]) -> str:
    """A split as a proposal names it: ``Ana Ruiz 40, Bo Li 30, Cy Diaz 30``."""
    return ", ".join(f"{name} {share}" for name, share in split.items())


def canonical(text: str) -> str:
    """Lower case, one space between words, no surrounding punctuation: how choices are compared."""
    return " ".join(text.lower().split()).strip(" .!\"'")


class GameRules:
    """A game's rule set: how a phase's moves resolve, when and how a game ends, what the spec must hold, how a
    rule player plays, and the exact judge. One module per rule set subclasses it (``werewolf``, ``undercover``,
    ``negotiation``); one instance is registered, and each game plays on its own (``new_game``)."""

    name: ClassVar[str]
    section: ClassVar[str] = GAME
    player_class: ClassVar[type[GamePlayer]] = GamePlayer
    oracle_class: ClassVar[type[GamePlayer] | None] = None  # a ``GameOracle`` subclass; None: no oracle seat

    def new_game(self) -> GameRules:
        """The rules for one game: a fresh instance, where a rule set keeps state (a negotiation's proposal)."""
        return type(self)()

    def check(self, spec: GameSpec) -> None:
        """Raise ValueError (naming the field) where ``spec`` breaks what these rules need."""

    def resolve(self, gm: GameMaster, phase: Phase, moves: dict[str, AgentAction]) -> list[Announcement]:
        raise NotImplementedError

    def outcome(self, gm: GameMaster) -> GameOutcome | None:
        """How the game ended, once it has; None while it goes on."""
        raise NotImplementedError

    def time_up(self, gm: GameMaster) -> GameOutcome:
        raise NotImplementedError

    def splits(self, gm: GameMaster) -> list[dict[str, int]]:
        """The splits a ``split`` phase offers (a negotiation's); none otherwise."""
        return []

    def player(self, spec: GameSpec, names: Sequence[str], seat: int, rng: random.Random | None = None) -> GamePlayer:
        """The rule player of ``seat`` (agent spec ``rule-player``), drawing from ``rng``."""
        return self.player_class(spec, names, seat, rng)

    def oracle_player(
        self, spec: GameSpec, names: Sequence[str], seat: int, rng: random.Random | None = None
    ) -> GamePlayer:
        """The oracle of ``seat`` (agent spec ``oracle-player``): this rule set's ``oracle_class``, handed every
        player's role (``hidden_roles``) besides what ``player`` gets, drawing from ``rng`` as the rule player
        would. ValueError where the rule set has none."""
        if self.oracle_class is None:
            raise ValueError(f"the {self.name} rule set has no oracle player")
        return self.oracle_class(spec, names, seat, rng, roles=hidden_roles(spec, names))

    def judge(self, section: GameSpec, names: Sequence[str], turns: Sequence[Turn], ended: str = "") -> Verdict:
        """The transcript replayed through the game master: per player the outcome's goal and ``success``, the
        game's counts in the reasoning. A game that did not reach its end (an agent error cut it short) has no
        verdict: the reason, never a score of 0."""
        outcome = replay(section, list(names), turns).outcome
        if outcome is None:
            why = ended or "unfinished"
            return Verdict({}, {}, "", error=f"the game did not reach its end ({why}): no outcome to judge")
        eliminated = ", ".join(outcome.eliminated) or "nobody"
        counts = f" Rounds: {outcome.cycles}; votes: {outcome.votes}; eliminated: {eliminated}."
        return Verdict(dict(outcome.goals), dict(outcome.success), outcome.reasoning + counts)
