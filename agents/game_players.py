"""Rule players for games (agent spec ``rule-player``): deterministic, no LLM, so tests and baselines need none.

``RulePlayer`` reads its role at reset and plays what it observes: the phase, the choices, and what the game
master and the others said. Its play is simple and exact:

- **werewolf.** The seer inspects the living players in seat order and, once it has found a werewolf, says so
  by day; villagers vote for whoever the seer named, else for the first living player after them in seat
  order; werewolves vote for and kill a seer who spoke up, else the first living villager in seat order.
- **undercover.** Each describes its word by its length and first letter ("It has 3 letters and starts with
  T."), then votes for a player whose description differs from most; the odd one out, seeing that it is,
  votes for the first other player.
- **negotiation.** It asks for a fair share; as proposer it offers every other party its third rounded to ten,
  plus ten for each time that party has rejected, and keeps the rest; it accepts any share above its reserve.
"""

from __future__ import annotations

import re
from collections import Counter

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.errors import UserError
from sotopia_env.games.spec import WOLVES, Role
from sotopia_env.observation import Observation
from sotopia_env.transcript import MODERATOR

_CLUE = re.compile(r"has (\d+) letters and starts with (\w)", re.I)
_SEER_CLAIM = re.compile(r"I am the seer: (.+?) is a werewolf", re.I)
_INSPECTED = re.compile(r"Your inspection: (.+?) (is a werewolf|is not a werewolf)")


class NotAGame(UserError, ValueError):
    """``rule-player`` took a seat in a scenario that is not a game."""


class RulePlayer:
    """Plays any shipped game by its rules; see the module's docstring for how."""

    model = "rule-player"

    def __init__(self) -> None:
        self.role: Role | None = None
        self.me = ""
        self.names: list[str] = []
        self.team: list[str] = []
        self.rules = ""

    def reset(self, setup: EpisodeSetup | None = None, seat: int | None = None) -> None:
        if setup is None or seat is None:
            return
        game = setup.scenario.game
        if game is None:
            raise NotAGame(f"rule-player: scenario {setup.scenario.id!r} is not a game (it has no 'game' section)")
        self.role, self.rules = game.role(seat), game.rules
        self.names, self.me = setup.agent_names, setup.agent_names[seat]
        self.team = [n for s, n in enumerate(self.names) if game.role(s).team == self.role.team]

    async def act(self, observation: Observation) -> AgentAction:
        obs = Observation.from_env(observation)
        if not obs.my_turn or self.role is None:
            return AgentAction(action_type=ActionType.none)
        if obs.choices:
            return AgentAction(action_type=ActionType.action, argument=self.choose(obs))
        return AgentAction(action_type=ActionType.speak, argument=self.say(obs))

    # -- speech -----------------------------------------------------------------------------------------------
    def say(self, obs: Observation) -> str:
        assert self.role is not None
        if self.rules == "undercover":
            word = self.role.secret
            return f"It has {len(word)} letters and starts with {word[0].upper()}."
        if self.rules == "negotiation":
            return "I think we should each get a fair share of it, and I can't go lower than what I'd get elsewhere."
        wolf = self.known_wolf(obs)
        if self.role.name == "seer" and wolf:
            return f"I am the seer: {wolf} is a werewolf. Vote for them."
        if self.role.team == WOLVES:
            return "I've been watching everyone, and I don't think we should rush our vote today."
        return "I have no proof yet; let's listen carefully and follow the evidence."

    # -- choices ----------------------------------------------------------------------------------------------
    def choose(self, obs: Observation) -> str:
        if self.rules == "negotiation":
            return self.negotiate(obs)
        named = {c: n for c in obs.choices for n in self.names if c.endswith(" " + n)}  # choice -> the player
        if self.rules == "undercover":
            odd = self.odd_one(obs)
            return next((c for c, n in named.items() if n == odd), obs.choices[0])
        first = obs.choices[0]
        verb, alive = first.removesuffix(named[first]).strip(), list(named.values())
        if self.role is not None and self.role.team == WOLVES:
            seer, prey = self.claimed_seer(obs), [n for n in alive if n not in self.team]
            return f"{verb} {seer if seer in prey else prey[0]}"
        if verb == "inspect":
            seen = self.inspected(obs)
            return f"{verb} {next((n for n in alive if n not in seen), alive[0])}"
        wolf = self.known_wolf(obs)
        if wolf in alive:
            return f"{verb} {wolf}"
        me = self.names.index(self.me)
        after = self.names[me + 1 :] + self.names[:me]
        return f"{verb} {next(n for n in after if n in alive)}"

    def negotiate(self, obs: Observation) -> str:
        assert self.role is not None
        if obs.choices == ["accept", "reject"]:
            offer = self.offer_to_me(obs)
            return "accept" if offer is not None and offer > (self.role.reserve or 0) else "reject"
        shares = [self.parse_split(c) for c in obs.choices]
        pot = sum(shares[0].values())
        said = " ".join(h.argument for h in obs.history if h.agent == MODERATOR)
        rejected = Counter(n for n in self.names for _ in re.finditer(rf"\b{re.escape(n)}\b[^.]* rejected", said))
        fair = {n: round(pot / len(self.names), -1) + 10 * rejected[n] for n in self.names if n != self.me}
        for choice, split in zip(obs.choices, shares, strict=True):
            if all(split[n] == v for n, v in fair.items()):
                return choice
        return obs.choices[0]

    def parse_split(self, choice: str) -> dict[str, int]:
        return {n: int(m.group(1)) for n in self.names if (m := re.search(rf"{re.escape(n)} (\d+)", choice))}

    def offer_to_me(self, obs: Observation) -> int | None:
        for h in reversed(obs.history):
            if h.agent == MODERATOR and " proposes: " in h.argument:
                return self.parse_split(h.argument).get(self.me)
        return None

    # -- what the history says ----------------------------------------------------------------------------------
    def inspected(self, obs: Observation) -> dict[str, bool]:
        out = {}
        for h in obs.history:
            if h.agent == MODERATOR and (m := _INSPECTED.search(h.argument)):
                out[m.group(1)] = m.group(2) == "is a werewolf"
        return out

    def known_wolf(self, obs: Observation) -> str | None:
        """A living werewolf the seer found (the seer), or that a seer named by day (anyone else)."""
        gone = self.eliminated(obs)
        found = [n for n, wolf in self.inspected(obs).items() if wolf and n not in gone]
        if found:
            return found[0]
        for h in obs.history:
            if h.agent != MODERATOR and (m := _SEER_CLAIM.search(h.argument)) and m.group(1) not in gone:
                return m.group(1)
        return None

    def claimed_seer(self, obs: Observation) -> str | None:
        return next((h.agent for h in obs.history if h.agent != MODERATOR and _SEER_CLAIM.search(h.argument)), None)

    def eliminated(self, obs: Observation) -> set[str]:
        said = " ".join(h.argument for h in obs.history if h.agent == MODERATOR)
        return {n for n in self.names if f"{n} is eliminated" in said or f"{n} is found dead" in said}

    def odd_one(self, obs: Observation) -> str | None:
        """The player whose clue differs from most clues (None if all agree); never this player itself."""
        clues = {}
        for h in obs.history:
            if h.agent != MODERATOR and (m := _CLUE.search(h.argument)):
                clues[h.agent] = (m.group(1), m.group(2).upper())
        gone = self.eliminated(obs)
        clues = {n: c for n, c in clues.items() if n not in gone}
        if not clues:
            return None
        common, _ = Counter(clues.values()).most_common(1)[0]
        odd = [n for n, c in clues.items() if c != common and n != self.me]
        if odd:
            return odd[0]
        return next((n for n in clues if n != self.me), None) if clues.get(self.me) != common else None
