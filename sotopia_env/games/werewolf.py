"""Werewolf: two teams, the wolves (who know each other) and the village (with a seer), by night and by day.

- **Rules.** A ``vote`` phase eliminates the player with the most votes (``games.teams``). A night phase whose
  verb is ``kill`` eliminates the wolves' choice (the most named; a tie goes to the earliest wolf's choice, in
  seat order). A phase whose verb is ``inspect`` tells its actor, and only them, whether the player named is a
  werewolf. An eliminated player's role is revealed. The village wins once no werewolf is alive; the wolves win
  once they are as many as the others, or when time runs out with a wolf alive.
- **Checks.** A seat on team ``wolves``, more other players than wolves, a vote phase.
- **Rule player.** Seeded by the episode, knowing only what its seat knows (``WerewolfPlayer``): the seer
  inspects at random and names the werewolves it finds; werewolves bluff (a false seer claim) and steer the
  votes; villagers weigh the claims, who lied and who voted against revealed villagers, with some error.
- **Oracle player.** Handed every player's role (``WerewolfOracle``): the wolves kill the seer the first night
  and vote out villagers together; the seer and the villagers name and vote out a werewolf they know.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from sotopia_env.actions import AgentAction
from sotopia_env.games.master import GameMaster
from sotopia_env.games.outcome import Announcement
from sotopia_env.games.players import GameOracle, Seen
from sotopia_env.games.registry import register_game
from sotopia_env.games.spec import Phase
from sotopia_env.games.teams import TeamGame, TeamPlayer
from sotopia_env.transcript import MODERATOR

WOLVES, VILLAGE = "wolves", "village"
_SEER_CLAIM = re.compile(r"I am the seer: (.+?) is a werewolf", re.I)
_SUSPECT = re.compile(r"I suspect (.+?)\.")
_INSPECTED = re.compile(r"Your inspection: (.+?) (is a werewolf|is not a werewolf)")

SEER_SPEAKS = 0.9  # the seer names a werewolf it knows, by day (else it keeps quiet, to live longer)
WOLF_BLUFFS = 0.5  # a werewolf claims to be the seer and names a villager (once a day, one wolf at a time)
WOLF_COUNTERS = 0.8  # a werewolf named by a claimed seer answers with a seer claim naming that accuser
WOLF_LEADS = 0.3  # a werewolf without a claim to follow voices a suspicion of a villager (its team then votes so)
VILLAGER_ERRS = 0.05  # a villager's vote goes to anyone, whatever the evidence


@dataclass
class Table:
    """What anyone at the table has seen: who claimed to be the seer and named whom, who voiced a suspicion, who
    voted for whom, and the roles the game master revealed (of the eliminated and the dead)."""

    claims: list[tuple[str, str]] = field(default_factory=list)  # (claimer, named), in order
    suspicions: list[tuple[str, str]] = field(default_factory=list)  # (speaker, suspect), in order
    votes: list[tuple[str, str]] = field(default_factory=list)  # (voter, voted for)
    revealed: dict[str, str] = field(default_factory=dict)  # name -> role

    @classmethod
    def read(cls, seen: Seen, names: list[str]) -> Table:
        table = cls()
        for h in seen.history:
            if h.agent == MODERATOR:
                for n in names:
                    if m := re.search(rf"{re.escape(n)} was an? ([\w-]+)\.", h.argument):
                        table.revealed[n] = m.group(1)
            elif (m := _SEER_CLAIM.search(h.argument)) and m.group(1) in names:
                table.claims.append((h.agent, m.group(1)))
            elif (m := _SUSPECT.search(h.argument)) and m.group(1) in names:
                table.suspicions.append((h.agent, m.group(1)))
            elif h.argument.startswith("vote for ") and (named := h.argument.removeprefix("vote for ")) in names:
                table.votes.append((h.agent, named))
        return table

    def liars(self, me: str) -> list[str]:
        """Claimed seers shown to be lying (there is one seer): one named a player revealed not to be a werewolf,
        or named ``me`` (who knows it is no werewolf), or claimed while another was revealed as the seer or was
        proven right (named a player revealed to be a werewolf)."""
        seers = {n for n, r in self.revealed.items() if r == "seer"}
        seers |= {c for c, named in self.claims if self.revealed.get(named) == "werewolf"}
        out = []
        for claimer, named in self.claims:
            lying = named == me or self.revealed.get(named, "werewolf") != "werewolf" or bool(seers - {claimer})
            if lying and claimer not in out:
                out.append(claimer)
        return out

    def vote_record(self) -> Counter[str]:
        """Per voter: one point for each vote against a player revealed to be no werewolf, minus one for each vote
        against a revealed werewolf."""
        score: Counter[str] = Counter()
        for voter, named in self.votes:
            if named in self.revealed:
                score[voter] += -1 if self.revealed[named] == "werewolf" else 1
        return score


class WerewolfPlayer(TeamPlayer):
    """Werewolf by what its seat knows, with chance in it:

    - the seer inspects a random living player it has not inspected; by day it names a werewolf it knows (found,
      or a false seer: it is the only seer) with probability ``SEER_SPEAKS``, and votes for it;
    - a villager votes for a claimed seer shown to be lying, else for whom a claimed seer named (one claim, drawn
      at random when several disagree), else at random; with probability ``VILLAGER_ERRS`` at random anyway;
    - werewolves bluff: one claims to be the seer and names a villager (``WOLF_BLUFFS``), and one named by a
      claimed seer names that accuser back (``WOLF_COUNTERS``); they vote and kill together: their own claim's
      target, else a seer who named one of them, else a random villager.
    """

    def say(self, seen: Seen) -> str:
        table = Table.read(seen, self.names)
        alive = self.living(seen)
        if self.role.team == WOLVES:
            return self.wolf_line(table, alive)
        if self.role.name == "seer":
            wolf = self.seer_wolf(seen, table, alive)
            if wolf and self.rng.random() < SEER_SPEAKS:
                return f"I am the seer: {wolf} is a werewolf. Vote for them."
            return "I have no proof yet; let's listen carefully and follow the evidence."
        suspect = self.village_suspect(table, alive)
        return f"I suspect {suspect}." if suspect else "I have no proof yet; let's listen carefully."

    def choose(self, seen: Seen) -> str:
        named = self.named(seen)
        options = list(named.values())
        verb = seen.choices[0].removesuffix(named[seen.choices[0]]).strip()
        table = Table.read(seen, self.names)
        if self.role.team == WOLVES:
            target = self.wolf_target(table, options)
        elif verb == "inspect":
            inspected = self.inspected(seen)
            target = self.rng.choice([n for n in options if n not in inspected] or options)
        elif self.role.name == "seer":
            wolf = self.seer_wolf(seen, table, options)
            cleared = {n for n, wolf in self.inspected(seen).items() if not wolf}
            target = wolf or self.rng.choice([n for n in options if n not in cleared] or options)
        else:
            target = self.village_suspect(table, options)
            if target is None or self.rng.random() < VILLAGER_ERRS:
                target = self.rng.choice(options)
        return f"{verb} {target}"

    # -- what a seat reads -------------------------------------------------------------------------------------
    def living(self, seen: Seen) -> list[str]:
        gone = self.eliminated(seen)
        return [n for n in self.names if n not in gone]

    def inspected(self, seen: Seen) -> dict[str, bool]:
        out = {}
        for h in seen.history:
            if h.agent == MODERATOR and (m := _INSPECTED.search(h.argument)):
                out[m.group(1)] = m.group(2) == "is a werewolf"
        return out

    def seer_wolf(self, seen: Seen, table: Table, among: list[str]) -> str | None:
        """A werewolf the seer knows among ``among``: one it found, else one who claimed to be the seer."""
        found = [n for n, wolf in self.inspected(seen).items() if wolf and n in among]
        false_seers = [c for c, _ in table.claims if c != self.me and c in among]
        return next(iter(found + false_seers), None)

    # -- the village -------------------------------------------------------------------------------------------
    def village_suspect(self, table: Table, among: list[str]) -> str | None:
        """A villager's suspect among ``among``: a lying claimed seer, else one named by a claimed seer not shown
        to lie (a random one when several claims disagree), else the worst vote record (votes against revealed
        villagers), else the suspicion voiced most; None without evidence."""
        among = [n for n in among if n != self.me]
        liars = [n for n in table.liars(self.me) if n in among]
        if liars:
            return liars[0]
        named = [n for c, n in table.claims if c not in liars and n in among]
        if named:
            return self.rng.choice(named)
        record = table.vote_record()
        worst = max((record[n] for n in among), default=0)
        return self.rng.choice([n for n in among if record[n] == worst]) if worst > 0 else None

    # -- the wolves --------------------------------------------------------------------------------------------
    def wolf_line(self, table: Table, alive: list[str]) -> str:
        prey = [n for n in alive if n not in self.team]
        ours = [n for c, n in table.claims + table.suspicions if c in self.team and n in prey]
        accusers = [c for c, n in table.claims if n in self.team and c in prey]
        if self.me in {n for _, n in table.claims} and accusers and self.rng.random() < WOLF_COUNTERS:
            return f"I am the seer: {accusers[-1]} is a werewolf. Vote for them."
        if ours:
            return f"I suspect {ours[-1]}."
        if self.rng.random() < WOLF_BLUFFS:
            return f"I am the seer: {self.rng.choice(prey)} is a werewolf. Vote for them."
        if accusers:
            return f"I suspect {accusers[-1]}."
        if self.rng.random() < WOLF_LEADS:
            return f"I suspect {self.rng.choice(prey)}."
        return "I've been watching everyone, and I don't think we should rush our vote today."

    def wolf_target(self, table: Table, options: list[str]) -> str:
        """Where the wolves' votes and kills go: the latest player their own claims or suspicions named, else a
        seer who named one of them, else a random villager."""
        prey = [n for n in options if n not in self.team]
        ours = [n for c, n in table.claims + table.suspicions if c in self.team and n in prey]
        accusers = [c for c, n in table.claims if n in self.team and c in prey]
        return (accusers + ours)[-1] if ours + accusers else self.rng.choice(prey)


class WerewolfOracle(WerewolfPlayer, GameOracle):
    """Werewolf knowing every player's role, the ceiling beside ``WerewolfPlayer``:

    - the werewolves know the seer, so they kill it the first night (it inspects once and dies before it can
      speak: no check of it ever reaches the table, so which player it inspected, seen by the seer alone and not
      a fact of the setup, need not be known); while it lives they vote for it too. Once it is dead and revealed
      every seer claim reads as a lie, so they make none: they name the first living villager in seat order, and
      both vote for it and kill it (the same choice without a word between them);
    - the seer inspects a werewolf it has not inspected, names the first living werewolf in seat order every
      day and votes for it; a villager says it suspects that werewolf and votes for it (every oracle of the
      village names the same one, so their votes add up).

    Its random stream is the rule player's, drawn only where it falls back to the rule player (a seer with every
    werewolf inspected), so the same episode plays the same game.
    """

    def say(self, seen: Seen) -> str:
        alive = self.living(seen)
        if self.role.team == WOLVES:
            if self.with_role("seer", alive):  # not after the first night: the rule wolf's bluffs while it lives
                return self.wolf_line(Table.read(seen, self.names), alive)
            return f"I suspect {self.prey(alive)}."
        wolf = self.with_team(WOLVES, alive)[0]  # someone is alive on each side while the game goes on
        if self.role.name == "seer":
            return f"I am the seer: {wolf} is a werewolf. Vote for them."
        return f"I suspect {wolf}."

    def choose(self, seen: Seen) -> str:
        named = self.named(seen)
        options = list(named.values())
        verb = seen.choices[0].removesuffix(named[seen.choices[0]]).strip()
        if self.role.team == WOLVES:
            target = (self.with_role("seer", options) or [self.prey(options)])[0]
        elif verb == "inspect":
            inspected = self.inspected(seen)
            unknown = [n for n in self.with_team(WOLVES, options) if n not in inspected]
            return f"{verb} {unknown[0]}" if unknown else super().choose(seen)
        else:
            target = self.with_team(WOLVES, options)[0]
        return f"{verb} {target}"

    def with_role(self, role: str, among: list[str]) -> list[str]:
        return [n for n in among if self.roles[n].name == role]

    def prey(self, among: list[str]) -> str:
        """The wolves' common target among ``among``: the first player in seat order not on their team."""
        return next(n for n in among if self.roles[n].team != WOLVES)


class Werewolf(TeamGame):
    name = "werewolf"
    villains, good = WOLVES, VILLAGE
    player_class = WerewolfPlayer
    oracle_class = WerewolfOracle

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


RULES = register_game(Werewolf())
