"""Negotiation: a proposer splits the pot; the others accept or reject; no deal by the end: everyone's reserve.

- **Rules.** A ``split`` phase records its actor's proposal of the ``pot`` (in tenths); a ``yes-no`` phase then
  takes the others' answers. All accept: each gets their share. Time runs out without a deal: each gets their
  role's ``reserve``. Goal: ``10 * (payoff - reserve) / (pot - sum of reserves)``, rounded half up, within
  0..10; success: a payoff above one's reserve.
- **Checks.** A pot, a reserve for every role, a split phase and a yes-no phase.
- **Rule player.** Seeded by the episode (``NegotiationPlayer``): a proposer asks an even share plus a random
  greed that shrinks with each rejection; a responder accepts a share above its reserve plus a random hold-out
  that shrinks as the rounds pass. Neither knows another's reserve.
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

GREED = (0, 10, 20, 30)  # what a proposer asks beyond an even share, drawn once a game; 10 less per rejected round
HOLD_OUT = (0, 10, 20, 30)  # what a responder wants above its reserve, drawn each answer; 10 less each round
LINES = (
    "I think we should each get a fair share of it, and I can't go lower than what I'd get elsewhere.",
    "I put a lot into this; I'd like my share to show it.",
    "Let's settle this quickly: a deal is better for all of us than no deal.",
)


class NegotiationPlayer(GamePlayer):
    """A negotiator with a temper drawn from its random stream, knowing its own reserve only:

    - it says one of a few lines;
    - as proposer it asks an even share plus a greed drawn from ``GREED`` (10 less for each rejected proposal),
      never less than its reserve plus 10, and splits the rest between the others, ten more to each time a party
      rejected before (half of it from its own share);
    - as responder it accepts a share above its reserve plus a hold-out drawn from ``HOLD_OUT`` each time, less
      10 for each proposal already made (it gives in as time runs out).
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.greed = self.rng.choice(GREED)

    def say(self, seen: Seen) -> str:
        return self.rng.choice(LINES)

    def choose(self, seen: Seen) -> str:
        said = " ".join(h.argument for h in seen.history if h.agent == MODERATOR)
        if list(seen.choices) == ["accept", "reject"]:
            offer = self.offer_to_me(seen)
            hold_out = max(0, self.rng.choice(HOLD_OUT) - 10 * (said.count(" proposes: ") - 1))
            return "accept" if offer is not None and offer > (self.role.reserve or 0) + hold_out else "reject"
        shares = [self.parse_split(c) for c in seen.choices]
        pot = sum(shares[0].values())
        rejected = Counter(n for n in self.names for _ in re.finditer(rf"\b{re.escape(n)}\b[^.]* rejected", said))
        others = [n for n in self.names if n != self.me]
        rounds = said.count(" rejected the proposal")
        keep = max((self.role.reserve or 0) + 10, pot / len(self.names) + self.greed - 10 * rounds)
        extra = {n: 10 * rejected[n] for n in others}
        keep = max((self.role.reserve or 0) + 10, keep - sum(extra.values()) / 2)
        want = {n: (pot - keep - sum(extra.values())) / len(others) + extra[n] for n in others} | {self.me: keep}
        floor = (self.role.reserve or 0) + 10
        allowed = [i for i, split in enumerate(shares) if split[self.me] >= floor] or list(range(len(shares)))
        best = min(allowed, key=lambda i: sum(abs(shares[i][n] - v) for n, v in want.items()))
        return seen.choices[best]

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
