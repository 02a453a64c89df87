"""Undercover: every player has a secret word; the undercover team's word differs from the civilians'.

- **Rules.** Each role's ``secret`` is its word. A player whose description says their own word (as a whole
  word, any case) is out at the end of that phase. Votes as in werewolf (``games.teams``). The civilians win
  once every undercover player is out; the undercover team wins once it is as many as the civilians, or when
  time runs out with one of them alive.
- **Checks.** A seat on team ``undercover``, more civilians than undercover players, a vote phase, and a secret
  word for every role.
- **Rule player.** Each describes its word by its length and first letter ("It has 3 letters and starts with
  T."), then votes for a player whose description differs from most; the odd one out, seeing that it is, votes
  for the first other player.
"""

from __future__ import annotations

import re
from collections import Counter

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.games.master import GameMaster
from sotopia_env.games.outcome import Announcement
from sotopia_env.games.players import Seen
from sotopia_env.games.spec import GameSpec, Phase
from sotopia_env.games.teams import TeamGame, TeamPlayer
from sotopia_env.transcript import MODERATOR

UNDERCOVER, CIVILIANS = "undercover", "civilians"
_CLUE = re.compile(r"has (\d+) letters and starts with (\w)", re.I)


class UndercoverPlayer(TeamPlayer):
    def say(self, seen: Seen) -> str:
        word = self.role.secret
        return f"It has {len(word)} letters and starts with {word[0].upper()}."

    def choose(self, seen: Seen) -> str:
        odd = self.odd_one(seen)
        return next((c for c, n in self.named(seen).items() if n == odd), seen.choices[0])

    def odd_one(self, seen: Seen) -> str | None:
        """The player whose clue differs from most clues (None if all agree); never this player itself."""
        clues = {}
        for h in seen.history:
            if h.agent != MODERATOR and (m := _CLUE.search(h.argument)):
                clues[h.agent] = (m.group(1), m.group(2).upper())
        gone = self.eliminated(seen)
        clues = {n: c for n, c in clues.items() if n not in gone}
        if not clues:
            return None
        common, _ = Counter(clues.values()).most_common(1)[0]
        odd = [n for n, c in clues.items() if c != common and n != self.me]
        if odd:
            return odd[0]
        return next((n for n in clues if n != self.me), None) if clues.get(self.me) != common else None


class Undercover(TeamGame):
    name = "undercover"
    villains, good = UNDERCOVER, CIVILIANS
    player_class = UndercoverPlayer

    def check(self, spec: GameSpec) -> None:
        super().check(spec)
        if any(not r.secret for r in spec.roles):
            raise ValueError("roles: every undercover role needs a secret word")

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


RULES = Undercover()
