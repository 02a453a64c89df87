"""Undercover: every player has a secret word; the undercover team's word differs from the civilians'.

- **Rules.** Each role's ``secret`` is its word. A player whose description says their own word (as a whole
  word, any case) is out at the end of that phase. Votes as in werewolf (``games.teams``). The civilians win
  once every undercover player is out; the undercover team wins once it is as many as the civilians, or when
  time runs out with one of them alive.
- **Checks.** A seat on team ``undercover``, more civilians than undercover players, a vote phase, and a secret
  word for every role.
- **Rule player.** Seeded by the episode, knowing its own word only (``UndercoverPlayer``): it gives one fact
  about its letters ("My word has 3 letters."), vaguely while unsure whether its word is the odd one; one who
  finds the others' clues contradict its word blends in by repeating theirs; votes go to whoever contradicts.
- **Oracle player.** Handed every player's role and word (``UndercoverOracle``): a civilian gives a true clue and
  votes for an undercover player it knows; an undercover player describes the civilians' word, so its clues
  fit theirs, and votes with its team for a civilian.
"""

from __future__ import annotations

import re

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.games.master import GameMaster
from sotopia_env.games.outcome import Announcement
from sotopia_env.games.players import GameOracle, Seen
from sotopia_env.games.registry import register_game
from sotopia_env.games.spec import GameSpec, Phase
from sotopia_env.games.teams import TeamGame, TeamPlayer
from sotopia_env.transcript import MODERATOR

UNDERCOVER, CIVILIANS = "undercover", "civilians"
_CLUE = re.compile(r"My word (has \d+ letters|starts with \w|ends with \w|has \d+ vowels)\.")
VAGUE = ("It's something most people know.", "You could come across it any day.", "I like it, honestly.")

WARY = 0.8  # until two clues tell it whether its word is the odd one, a player speaks vaguely
SLIPS = 0.1  # a player who has heard the others speaks vaguely anyway (civilian), or slips and tells its own word
ERRS = 0.25  # a vote goes to anyone, whatever the clues
COPYCAT = 0.25  # how much a clue that repeats an earlier one counts against its speaker (one that contradicts: 1)


def clue(word: str, feature: str) -> str:
    """One fact about ``word``, as a clue says it: ``My word has 5 letters.``"""
    vowels = sum(c in "aeiou" for c in word.lower())
    said = {
        "length": f"has {len(word)} letters",
        "first": f"starts with {word[0].upper()}",
        "last": f"ends with {word[-1].upper()}",
        "vowels": f"has {vowels} vowels",
    }
    return f"My word {said[feature]}."


FEATURES = ("length", "first", "last", "vowels")


class UndercoverPlayer(TeamPlayer):
    """Undercover by clues about letters, knowing only its own word (not whether it is the odd one):

    - a player describes its word by one random fact (its length, first or last letter, or vowels); until two
      clues have told it whether its word is the odd one it speaks vaguely with probability ``WARY`` (after:
      ``SLIPS``);
    - one who finds most clues contradict its word takes itself for the odd one and blends in: it repeats a
      clue it heard (slipping into the truth with probability ``SLIPS``) and votes at random;
    - the others vote for whoever said most clues that contradict their word, a repeated clue counting
      ``COPYCAT``, ties drawn at random; with probability ``ERRS`` a vote goes to anyone.
    """

    def say(self, seen: Seen) -> str:
        heard = self.clues(seen)
        word = self.role.secret
        if self.odd_one_out(heard):
            if self.rng.random() < SLIPS:
                return clue(word, self.rng.choice(FEATURES))
            return self.rng.choice([c for _, c in heard if c not in self.true_clues()])
        sure = len({n for n, c in heard if c in self.true_clues()}) >= 2
        if self.rng.random() < (SLIPS if sure else WARY):
            return self.rng.choice(VAGUE)
        return clue(word, self.rng.choice(FEATURES))

    def choose(self, seen: Seen) -> str:
        named = self.named(seen)
        options = list(named.values())
        verb = seen.choices[0].removesuffix(named[seen.choices[0]]).strip()
        heard = [(n, c) for n, c in self.clues(seen) if n in options]
        if self.odd_one_out(self.clues(seen)) or self.rng.random() < ERRS:
            return f"{verb} {self.rng.choice(options)}"
        doubt = dict.fromkeys(options, 0.0)
        said: set[str] = set()
        for name, line in heard:
            doubt[name] += (line not in self.true_clues()) + COPYCAT * (line in said)
            said.add(line)
        top = max(doubt.values())
        return f"{verb} {self.rng.choice([n for n, d in doubt.items() if d == top])}"

    def clues(self, seen: Seen) -> list[tuple[str, str]]:
        """(player, clue) for every clue the others said, living or not, in order."""
        return [
            (h.agent, m.group(0))
            for h in seen.history
            if h.agent not in (MODERATOR, self.me) and (m := _CLUE.search(h.argument))
        ]

    def true_clues(self) -> set[str]:
        return {clue(self.role.secret, f) for f in FEATURES}

    def odd_one_out(self, heard: list[tuple[str, str]]) -> bool:
        """Whether most players who gave a clue said one that contradicts this player's word (two at least)."""
        against = {n for n, c in heard if c not in self.true_clues()}
        return len(against) >= 2 and len(against) > len({n for n, _ in heard}) / 2


class UndercoverOracle(UndercoverPlayer, GameOracle):
    """Undercover knowing every player's role and word, the ceiling beside ``UndercoverPlayer``:

    - it describes by one random fact (as the rule player does, never vaguely) the civilians' word: its own as a
      civilian, the others' as an undercover player, whose clues then fit the civilians' and never say its word;
    - it votes for the first living player in seat order on the other team (its team's oracles name the same).
    """

    def say(self, seen: Seen) -> str:
        word = next(r.secret for r in self.roles.values() if r.team != UNDERCOVER)
        return clue(word, self.rng.choice(FEATURES))

    def choose(self, seen: Seen) -> str:
        named = self.named(seen)
        verb = seen.choices[0].removesuffix(named[seen.choices[0]]).strip()
        other = next(n for n in named.values() if self.roles[n].team != self.role.team)
        return f"{verb} {other}"


class Undercover(TeamGame):
    name = "undercover"
    villains, good = UNDERCOVER, CIVILIANS
    player_class = UndercoverPlayer
    oracle_class = UndercoverOracle

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


RULES = register_game(Undercover())
