"""Werewolf: two teams, the wolves (who know each other) and the village (with a seer), by night and by day.

- **Rules.** A ``vote`` phase eliminates the player with the most votes (``games.teams``). A night phase whose
  verb is ``kill`` eliminates the wolves' choice (the most named; a tie goes to the earliest wolf's choice, in
  seat order). A phase whose verb is ``inspect`` tells its actor, and only them, whether the player named is a
  werewolf. An eliminated player's role is revealed. The village wins once no werewolf is alive; the wolves win
  once they are as many as the others, or when time runs out with a wolf alive.
- **Checks.** A seat on team ``wolves``, more other players than wolves, a vote phase.
- **Rule player.** The seer inspects the living players in seat order and, once it has found a werewolf, says so
  by day; villagers vote for whoever the seer named, else for the first living player after them in seat order;
  werewolves vote for and kill a seer who spoke up, else the first living villager in seat order.
"""

from __future__ import annotations

import re
from collections import Counter

from sotopia_env.actions import AgentAction
from sotopia_env.games.master import GameMaster
from sotopia_env.games.outcome import Announcement
from sotopia_env.games.players import Seen
from sotopia_env.games.spec import Phase
from sotopia_env.games.teams import TeamGame, TeamPlayer
from sotopia_env.transcript import MODERATOR

WOLVES, VILLAGE = "wolves", "village"
_SEER_CLAIM = re.compile(r"I am the seer: (.+?) is a werewolf", re.I)
_INSPECTED = re.compile(r"Your inspection: (.+?) (is a werewolf|is not a werewolf)")


class WerewolfPlayer(TeamPlayer):
    def say(self, seen: Seen) -> str:
        wolf = self.known_wolf(seen)
        if self.role.name == "seer" and wolf:
            return f"I am the seer: {wolf} is a werewolf. Vote for them."
        if self.role.team == WOLVES:
            return "I've been watching everyone, and I don't think we should rush our vote today."
        return "I have no proof yet; let's listen carefully and follow the evidence."

    def choose(self, seen: Seen) -> str:
        named = self.named(seen)
        first = seen.choices[0]
        verb, alive = first.removesuffix(named[first]).strip(), list(named.values())
        if self.role.team == WOLVES:
            seer, prey = self.claimed_seer(seen), [n for n in alive if n not in self.team]
            return f"{verb} {seer if seer in prey else prey[0]}"
        if verb == "inspect":
            inspected = self.inspected(seen)
            return f"{verb} {next((n for n in alive if n not in inspected), alive[0])}"
        wolf = self.known_wolf(seen)
        if wolf in alive:
            return f"{verb} {wolf}"
        me = self.names.index(self.me)
        after = self.names[me + 1 :] + self.names[:me]
        return f"{verb} {next(n for n in after if n in alive)}"

    def inspected(self, seen: Seen) -> dict[str, bool]:
        out = {}
        for h in seen.history:
            if h.agent == MODERATOR and (m := _INSPECTED.search(h.argument)):
                out[m.group(1)] = m.group(2) == "is a werewolf"
        return out

    def known_wolf(self, seen: Seen) -> str | None:
        """A living werewolf the seer found (the seer), or that a seer named by day (anyone else)."""
        gone = self.eliminated(seen)
        found = [n for n, wolf in self.inspected(seen).items() if wolf and n not in gone]
        if found:
            return found[0]
        for h in seen.history:
            if h.agent != MODERATOR and (m := _SEER_CLAIM.search(h.argument)) and m.group(1) not in gone:
                return m.group(1)
        return None

    def claimed_seer(self, seen: Seen) -> str | None:
        return next((h.agent for h in seen.history if h.agent != MODERATOR and _SEER_CLAIM.search(h.argument)), None)


class Werewolf(TeamGame):
    name = "werewolf"
    villains, good = WOLVES, VILLAGE
    player_class = WerewolfPlayer

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


RULES = Werewolf()
