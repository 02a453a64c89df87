"""The rule sets a game master runs: how a phase's moves resolve, and when and how a game ends.

- ``werewolf``: a ``vote`` phase (choices naming players, verb ``vote for``) eliminates the player with the
  most votes; a tie eliminates nobody. A night phase whose verb is ``kill`` eliminates the wolves' choice (the
  most named; a tie goes to the earliest wolf's choice, in seat order). A phase whose verb is ``inspect`` tells
  its actor, and only them, whether the player named is a werewolf. An eliminated player's role is revealed.
  The village wins once no werewolf is alive; the wolves win once they are as many as the others, or when
  time runs out with a wolf alive.
- ``undercover``: each role's ``secret`` is its word; the ``undercover`` team's word differs. A player whose
  description says their own word (as a whole word, any case) is out at the end of that phase. Votes as in
  werewolf. The civilians win once every undercover
  player is out; the undercover team wins once it is as many as the civilians, or when time runs out with one
  of them alive.
- ``negotiation``: a ``split`` phase records its actor's proposal of the ``pot`` (in tenths); a ``yes-no``
  phase then takes the others' answers. All accept: each gets their share. Time runs out without a deal: each
  gets their role's ``reserve``. Goal: ``10 * (payoff - reserve) / (pot - sum of reserves)``, rounded
  half up, within 0..10; success: a payoff above one's reserve.

A game's goal is 10 for a win and 0 for a loss (werewolf, undercover), with ``success`` the win.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from typing import Protocol

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.games.outcome import Announcement, GameOutcome
from sotopia_env.games.spec import CIVILIANS, UNDERCOVER, VILLAGE, WOLVES, GameSpec, Phase, Role


class GameMaster(Protocol):
    """What the rules read and change of a game in play (``sotopia_env.games.master.GameMaster``)."""

    spec: GameSpec
    names: list[str]
    roles: dict[str, Role]
    alive: list[str]
    eliminated: list[str]
    cycle: int
    votes: int

    @property
    def phase(self) -> Phase: ...
    def picked(self, moves: dict[str, AgentAction]) -> dict[str, str]: ...
    def eliminate(self, name: str) -> None: ...


class Rules(Protocol):
    def resolve(self, gm: GameMaster, phase: Phase, moves: dict[str, AgentAction]) -> list[Announcement]: ...
    def outcome(self, gm: GameMaster) -> GameOutcome | None: ...
    def time_up(self, gm: GameMaster) -> GameOutcome: ...
    def splits(self, gm: GameMaster) -> list[dict[str, int]]: ...


class _TeamGame:
    """Shared by the elimination games: votes, team wins, the win/loss outcome."""

    villains = ""
    good = ""
    time_favours_villains = True

    def splits(self, gm: GameMaster) -> list[dict[str, int]]:
        return []

    def vote_out(self, gm: GameMaster, moves: dict[str, AgentAction]) -> list[Announcement]:
        tally = Counter(gm.picked(moves).values())
        if not tally:
            return [Announcement("Nobody cast a valid vote; nobody is eliminated.")]
        counts = ", ".join(f"{n} {c}" for n, c in sorted(tally.items(), key=lambda kv: (-kv[1], kv[0])))
        top = max(tally.values())
        leaders = [n for n, c in tally.items() if c == top]
        if len(leaders) > 1:
            return [Announcement(f"Votes: {counts}. The vote is tied; nobody is eliminated.")]
        gm.eliminate(leaders[0])
        return [Announcement(f"Votes: {counts}. {leaders[0]} is eliminated. {self.reveal(gm, leaders[0])}")]

    def reveal(self, gm: GameMaster, name: str) -> str:
        return f"{name} was a {gm.roles[name].name}."

    def counts(self, gm: GameMaster) -> tuple[int, int]:
        villains = sum(1 for n in gm.alive if gm.roles[n].team == self.villains)
        return villains, len(gm.alive) - villains

    def outcome(self, gm: GameMaster) -> GameOutcome | None:
        villains, others = self.counts(gm)
        if villains == 0:
            return self.won_by(gm, self.good, f"Every {self.villains} player is out: the {self.good} win.")
        if villains >= others:
            return self.won_by(gm, self.villains, f"The {self.villains} are as many as the rest: they win.")
        return None

    def time_up(self, gm: GameMaster) -> GameOutcome:
        villains, _ = self.counts(gm)
        if villains and self.time_favours_villains:
            return self.won_by(gm, self.villains, f"A {self.villains} player survived every round: they win.")
        return self.won_by(gm, self.good, f"The {self.good} held out to the end: they win.")

    def won_by(self, gm: GameMaster, team: str, reasoning: str) -> GameOutcome:
        win = {n: gm.roles[n].team == team for n in gm.names}
        winners = ", ".join(n for n in gm.names if win[n])
        return GameOutcome(
            goals={n: 10 if w else 0 for n, w in win.items()},
            success=win,
            reasoning=f"{reasoning} Winners: {winners}.",
            cycles=gm.cycle + 1,
            votes=gm.votes,
            eliminated=list(gm.eliminated),
        )


class Werewolf(_TeamGame):
    villains, good = WOLVES, VILLAGE

    def resolve(self, gm: GameMaster, phase: Phase, moves: dict[str, AgentAction]) -> list[Announcement]:
        if phase.choices is None:
            return []
        if phase.verb == "kill":
            picks = gm.picked(moves)
            if not picks:
                return [Announcement("The night passes quietly; nobody is killed.")]
            tally = Counter(picks.values())
            top = max(tally.values())
            victim = next(p for n, p in picks.items() if tally[p] == top)  # picks keep seat order
            gm.eliminate(victim)
            return [Announcement(f"At dawn, {victim} is found dead. {self.reveal(gm, victim)}")]
        if phase.verb == "inspect":
            said = []
            for seer, target in gm.picked(moves).items():
                verdict = "is a werewolf" if gm.roles[target].team == WOLVES else "is not a werewolf"
                said.append(Announcement(f"Your inspection: {target} {verdict}.", [seer]))
            return said
        return self.vote_out(gm, moves)


class Undercover(_TeamGame):
    villains, good = UNDERCOVER, CIVILIANS

    def resolve(self, gm: GameMaster, phase: Phase, moves: dict[str, AgentAction]) -> list[Announcement]:
        if phase.choices is not None:
            return self.vote_out(gm, moves)
        said = []
        for name, action in moves.items():  # saying one's own word gives the game away: that player is out
            word = gm.roles[name].secret
            if action.action_type is ActionType.speak and re.search(rf"\b{re.escape(word)}\b", action.argument, re.I):
                gm.eliminate(name)
                said.append(Announcement(f"{name} said their secret word and is out. {self.reveal(gm, name)}"))
        return said

    def reveal(self, gm: GameMaster, name: str) -> str:
        undercover = gm.roles[name].team == UNDERCOVER
        return f"{name} was {'the undercover player' if undercover else 'not the undercover player'}."


class Negotiation:
    """A proposer splits the pot; the others accept or reject; no deal by the end: everyone's reserve."""

    def __init__(self) -> None:  # one Rules object per game: the state of this game's talks
        self.proposal: dict[str, int] | None = None
        self.deal: dict[str, int] | None = None

    def splits(self, gm: GameMaster) -> list[dict[str, int]]:
        """Every split of the pot in tenths (steps of ``pot // 10``); the last seat's share takes any remainder."""
        pot = gm.spec.pot or 0
        step = max(1, pot // 10)
        heads = itertools.product(range(0, pot + 1, step), repeat=len(gm.names) - 1)
        return [dict(zip(gm.names, (*head, pot - sum(head)), strict=True)) for head in heads if sum(head) <= pot]

    def resolve(self, gm: GameMaster, phase: Phase, moves: dict[str, AgentAction]) -> list[Announcement]:
        if phase.choices == "split":
            self.proposal = None
            for name, action in moves.items():
                self.proposal = self._parse(gm, action)
                if self.proposal is not None:
                    return [Announcement(f"{name} proposes: {split_text(self.proposal)}.")]
            return [Announcement("No valid proposal was made this round.")]
        if phase.choices == "yes-no":
            if self.proposal is None:
                return []
            answers = {n: canonical(a.argument) for n, a in moves.items() if not a.error}
            rejecting = [n for n in moves if answers.get(n) != "accept"]
            if rejecting:
                self.proposal = None
                return [Announcement(f"{', '.join(rejecting)} rejected the proposal. There is no deal yet.")]
            self.deal = self.proposal
            return [Announcement("Everyone accepted: the deal is done.")]
        return []

    def outcome(self, gm: GameMaster) -> GameOutcome | None:
        return None if self.deal is None else self._paid(gm, self.deal, "Deal")

    def time_up(self, gm: GameMaster) -> GameOutcome:
        return self._paid(gm, {n: gm.roles[n].reserve or 0 for n in gm.names}, "No deal; everyone takes their reserve")

    def _paid(self, gm: GameMaster, payoffs: dict[str, int], how: str) -> GameOutcome:
        reserves = {n: gm.roles[n].reserve or 0 for n in gm.names}
        surplus = max(1, (gm.spec.pot or 0) - sum(reserves.values()))
        goals = {n: max(0, min(10, int(10 * (payoffs[n] - reserves[n]) / surplus + 0.5))) for n in gm.names}
        shares = ", ".join(f"{n} {payoffs[n]} (reserve {reserves[n]})" for n in gm.names)
        return GameOutcome(
            goals=goals,
            success={n: payoffs[n] > reserves[n] for n in gm.names},
            reasoning=f"{how}: {shares}.",
            cycles=gm.cycle + 1,
            votes=gm.votes,
            payoffs=dict(payoffs),
        )

    def _parse(self, gm: GameMaster, action: AgentAction) -> dict[str, int] | None:
        if action.error or action.action_type is not ActionType.action:
            return None
        verb = gm.phase.verb.lower()
        text = canonical(action.argument).removeprefix(verb).strip()
        for split in self.splits(gm):
            if canonical(split_text(split)) == text:
                return split
        return None


def split_text(split: dict[str, int]) -> str:
    """A split as a proposal names it: ``Ana Ruiz 40, Bo Li 30, Cy Diaz 30``."""
    return ", ".join(f"{name} {share}" for name, share in split.items())


def canonical(text: str) -> str:
    """Lower case, one space between words, no surrounding punctuation: how choices are compared."""
    return " ".join(text.lower().split()).strip(" .!\"'")


RULES = {"werewolf": Werewolf, "undercover": Undercover, "negotiation": Negotiation}


def rules_for(name: str) -> Rules:
    return RULES[name]()
