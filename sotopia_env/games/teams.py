"""What the elimination games share (werewolf, undercover): a vote that puts one player out, two teams, and a
win for the team that outlasts the other.

- A ``vote`` phase (choices naming players, verb ``vote for``) eliminates the player with the most votes; a tie
  eliminates nobody. An eliminated player's role is revealed.
- The good team wins once no villain is alive; the villains win once they are as many as the others, or (when
  ``time_favours_villains``) when time runs out with one of them alive.
- Goal: 10 for a win and 0 for a loss, with ``success`` the win.
"""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

from sotopia_env.actions import AgentAction
from sotopia_env.games.master import GameMaster, GameRules
from sotopia_env.games.outcome import Announcement, GameOutcome
from sotopia_env.games.players import GamePlayer, Seen
from sotopia_env.games.spec import GameSpec
from sotopia_env.transcript import MODERATOR


class TeamGame(GameRules):
    villains: ClassVar[str] = ""
    good: ClassVar[str] = ""
    time_favours_villains: ClassVar[bool] = True

    def check(self, spec: GameSpec) -> None:
        teams = [spec.role(s).team for s in range(len(spec.seats))]
        bad = teams.count(self.villains)
        if bad == 0:
            raise ValueError(f"seats: {self.name} needs a seat on team {self.villains!r}")
        if bad >= len(teams) - bad:
            raise ValueError(
                f"seats: {self.name} needs more other players than {self.villains} ({bad} of {len(teams)})"
            )
        if not any(p.is_vote for p in spec.phases):
            raise ValueError(f"phases: {self.name} needs a vote phase (choices alive-others, verb 'vote for')")

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


class TeamPlayer(GamePlayer):
    """What the rule players of the elimination games read alike: who is out, and the player each choice names."""

    def eliminated(self, seen: Seen) -> set[str]:
        said = " ".join(h.argument for h in seen.history if h.agent == MODERATOR)
        return {n for n in self.names if f"{n} is eliminated" in said or f"{n} is found dead" in said}

    def named(self, seen: Seen) -> dict[str, str]:
        """Choice -> the player it names."""
        return {c: n for c in seen.choices for n in self.names if c.endswith(" " + n)}
