"""Negotiation: a proposer splits the pot; the others accept or reject; no deal by the end: everyone's reserve.

- **Rules.** A ``split`` phase records its actor's proposal of the ``pot`` (in tenths); a ``yes-no`` phase then
  takes the others' answers. All accept: each gets their share. Time runs out without a deal: each gets their
  role's ``reserve``. Goal: ``10 * (payoff - reserve) / (pot - sum of reserves)``, rounded half up, within
  0..10; success: a payoff above one's reserve.
- **Checks.** A pot, a reserve for every role, a split phase and a yes-no phase.
- **Rule player.** It asks for a fair share; as proposer it offers every other party its third rounded to ten,
  plus ten for each time that party has rejected, and keeps the rest; it accepts any share above its reserve.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.games.master import GameMaster, GameRules, canonical, split_text
from sotopia_env.games.outcome import Announcement, GameOutcome
from sotopia_env.games.players import GamePlayer, Seen
from sotopia_env.games.spec import GameSpec, Phase
from sotopia_env.transcript import MODERATOR


class NegotiationPlayer(GamePlayer):
    def say(self, seen: Seen) -> str:
        return "I think we should each get a fair share of it, and I can't go lower than what I'd get elsewhere."

    def choose(self, seen: Seen) -> str:
        if list(seen.choices) == ["accept", "reject"]:
            offer = self.offer_to_me(seen)
            return "accept" if offer is not None and offer > (self.role.reserve or 0) else "reject"
        shares = [self.parse_split(c) for c in seen.choices]
        pot = sum(shares[0].values())
        said = " ".join(h.argument for h in seen.history if h.agent == MODERATOR)
        rejected = Counter(n for n in self.names for _ in re.finditer(rf"\b{re.escape(n)}\b[^.]* rejected", said))
        fair = {n: round(pot / len(self.names), -1) + 10 * rejected[n] for n in self.names if n != self.me}
        for choice, split in zip(seen.choices, shares, strict=True):
            if all(split[n] == v for n, v in fair.items()):
                return choice
        return seen.choices[0]

    def parse_split(self, choice: str) -> dict[str, int]:
        return {n: int(m.group(1)) for n in self.names if (m := re.search(rf"{re.escape(n)} (\d+)", choice))}

    def offer_to_me(self, seen: Seen) -> int | None:
        for h in reversed(seen.history):
            if h.agent == MODERATOR and " proposes: " in h.argument:
                return self.parse_split(h.argument).get(self.me)
        return None


class Negotiation(GameRules):
    name = "negotiation"
    player_class = NegotiationPlayer

    def __init__(self) -> None:  # one instance per game (``new_game``): the state of this game's talks
        self.proposal: dict[str, int] | None = None
        self.deal: dict[str, int] | None = None

    def check(self, spec: GameSpec) -> None:
        if spec.pot is None:
            raise ValueError("pot: a negotiation needs a pot to split")
        if any(r.reserve is None for r in spec.roles):
            raise ValueError("roles: every negotiation role needs a reserve")
        if not any(p.choices == "split" for p in spec.phases) or not any(p.choices == "yes-no" for p in spec.phases):
            raise ValueError("phases: a negotiation needs a split phase and a yes-no phase")

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


RULES = Negotiation()
