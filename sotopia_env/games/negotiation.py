"""Negotiation: a proposer splits the pot; the others accept or reject; no deal by the end: everyone's reserve.

- **Rules.** A ``split`` phase records its actor's proposal of the ``pot`` (in tenths); a ``yes-no`` phase then
  takes the others' answers. All accept: each gets their share. Time runs out without a deal: each gets their
  role's ``reserve``. Goal: ``10 * (payoff - reserve) / (pot - sum of reserves)``, rounded half up, within
  0..10; success: a payoff above one's reserve.
- **Checks.** A pot, a reserve for every role, a split phase and a yes-no phase.
- **Rule player.** Seeded by the episode (``NegotiationPlayer``): a proposer asks an even share plus a random
  greed that shrinks with each rejection; a responder accepts a share above its reserve plus a random hold-out
  that shrinks as the rounds pass. Neither knows another's reserve.
- **Oracle player.** Handed every role's reserve (``NegotiationOracle``): the proposer makes the proposal with
  the best expected goal against the rule responders (their reserves known, their hold-outs the published
  ``HOLD_OUT`` draw), planning over the rounds left; a responder answers as the rule responder does.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable
from functools import cache
from typing import Any

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.games.master import GameMaster, GameRules, canonical, split_text
from sotopia_env.games.outcome import Announcement, GameOutcome
from sotopia_env.games.players import GameOracle, GamePlayer, Seen
from sotopia_env.games.registry import register_game
from sotopia_env.games.spec import GameSpec, Phase
from sotopia_env.transcript import MODERATOR

GREED = (0, 10, 20, 30)  # what a proposer asks beyond an even share, drawn once a game; 10 less per rejected round
HOLD_OUT = (0, 10, 20, 30)  # what a responder wants above its reserve, drawn each answer; 10 less each round
LINES = (
    "I think we should each get a fair share of it, and I can't go lower than what I'd get elsewhere.",
    "I put a lot into this; I'd like my share to show it.",
    "Let's settle this quickly: a deal is better for all of us than no deal.",
)


def given_in(hold_out: int, proposals: int) -> int:
    """What is left of a responder's drawn ``hold_out`` when answering the ``proposals``-th proposal (from 1)."""
    return max(0, hold_out - 10 * (proposals - 1))


def accept_chance(offer: int, reserve: int, proposals: int) -> float:
    """The chance that a rule responder with ``reserve`` accepts ``offer`` as the ``proposals``-th proposal (its
    hold-out drawn from ``HOLD_OUT``, as ``NegotiationPlayer.choose`` draws it)."""
    return sum(offer > reserve + given_in(h, proposals) for h in HOLD_OUT) / len(HOLD_OUT)


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
            hold_out = given_in(self.rng.choice(HOLD_OUT), said.count(" proposes: "))
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


class NegotiationOracle(NegotiationPlayer, GameOracle):
    """A negotiator handed every role's reserve, the ceiling beside ``NegotiationPlayer``:

    - as proposer it takes the split with the best expected goal: each responder accepts with
      ``accept_chance`` (its reserve known; its hold-out, the rule responder's private draw, only as the
      published ``HOLD_OUT`` distribution), all must accept, and a rejected round is worth the best expected goal
      of the rounds left (none left: its reserve, goal 0); ties go to the likelier deal, then the earlier choice.
      It maximises the goal (the reward), not the win (any deal above its reserve): where a surer deal keeps
      less, it takes the better expected goal and wins fewer games than the rule proposer (game:dev's
      band gig, whose reserves, all 20, are the even split's prior: there the hidden facts add nothing);
    - as responder it answers as the rule responder: its answer turns on its own reserve and on what later
      proposals bring, which the proposer's private temper (a random draw, not a fact of the setup) decides, so
      the others' reserves give it nothing to use. Its row in a table is the rule responder's, as it should be.

    Its lines and random draws are the rule player's, so the same episode plays the same game.
    """

    def __init__(self, spec: GameSpec, *args: Any, **kwargs: Any) -> None:  # GameOracle's, roles included
        super().__init__(spec, *args, **kwargs)
        self.cycles = spec.max_cycles
        self.pot = spec.pot or 0

    def choose(self, seen: Seen) -> str:
        if list(seen.choices) == ["accept", "reject"]:
            return super().choose(seen)
        said = " ".join(h.argument for h in seen.history if h.agent == MODERATOR)
        proposals = said.count(" proposes: ") + 1  # this one's number, as the responders count it
        rounds = said.count(" proposes: ") + said.count("No valid proposal")  # rounds played before this one
        shares = [self.parse_split(c) for c in seen.choices]
        plan = self.plan(tuple(tuple(sorted(split.items())) for split in shares))
        values = [plan(split, proposals, self.cycles - rounds) for split in shares]
        best = max(range(len(shares)), key=lambda i: (values[i], -i))
        return seen.choices[best]

    def plan(self, splits: tuple[tuple[tuple[str, int], ...], ...]) -> Callable[[dict[str, int], int, int], tuple]:
        """(split, its proposal's number, rounds left with it) -> (expected goal, chance of a win), the rounds after
        a rejection played at their best."""
        reserves = {n: role.reserve or 0 for n, role in self.roles.items()}
        surplus = max(1, self.pot - sum(reserves.values()))
        mine = reserves[self.me]

        def goal(payoff: int) -> int:  # the game's own (Negotiation._paid)
            return max(0, min(10, int(10 * (payoff - mine) / surplus + 0.5)))

        @cache
        def best(proposals: int, left: int) -> tuple[float, float]:
            if left <= 0:
                return 0.0, 0.0  # no deal: the reserve, goal 0, no win
            return max(value(dict(split), proposals, left) for split in splits)

        def value(split: dict[str, int], proposals: int, left: int) -> tuple[float, float]:
            chance = 1.0
            for name, share in split.items():
                if name != self.me:
                    chance *= accept_chance(share, reserves[name], proposals)
            later_goal, later_win = best(proposals + 1, left - 1)
            won = split[self.me] > mine
            return (
                chance * goal(split[self.me]) + (1 - chance) * later_goal,
                chance * won + (1 - chance) * later_win,
            )

        return lambda split, proposals, left: value(split, proposals, left)


class Negotiation(GameRules):
    name = "negotiation"
    player_class = NegotiationPlayer
    oracle_class = NegotiationOracle

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


RULES = register_game(Negotiation())
