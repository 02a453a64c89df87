"""A game's declaration, as a scenario's ``game:`` section holds it: roles, the seat each takes, and phases.

```yaml
game:
  rules: werewolf                 # the rule set that resolves moves and decides the outcome
  roles:
    - {name: werewolf, team: wolves, knows_team: true}
    - {name: seer, team: village}
    - {name: villager, team: village}
  seats: [werewolf, villager, seer, villager, werewolf, villager]   # one role per seat, in seat order
  phases:                          # one cycle; it repeats until the rules end the game (or max_cycles)
    - {name: day, actors: [alive], actions: [speak]}
    - {name: vote, actors: [alive], actions: [action], order: simultaneous, choices: alive-others, verb: vote for}
    - {name: night, actors: [werewolf], actions: [action], order: simultaneous, choices: alive-outside-team,
       verb: kill, channel: team}
```

- ``actors``: role names, team names, or ``alive`` (every living player). Only living players ever act.
- ``actions``: the action types the actors may take. A phase with ``choices`` makes ``action``'s argument one
  of a list: ``"<verb> <name>"`` for the players that ``alive``, ``alive-others`` or ``alive-outside-team``
  admit, ``"<verb> <name> <share>, ..."`` for every split of the ``pot`` in tenths (``split``), or ``accept`` /
  ``reject`` (``yes-no``). Anything else is an invalid action.
- ``channel``: who observes the actors' moves besides the judge: ``all``, their ``team``, or the actor only
  (``self``).
- ``order``: ``round-robin`` (one actor a step, ``rounds`` times around) or ``simultaneous`` (one step).

Checked on load, each problem as one line naming the field: an unknown rule set (``rules``: a game rule set of
the games' registry, ``sotopia_env.games.registry``), an unknown role in ``seats`` or in a phase's ``actors``, a phase
without actors, a seat count that differs from the scenario's goals, and the rule set's own needs (its
``check``: werewolf needs a werewolf and more villagers than wolves).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sotopia_env.actions import ActionType
from sotopia_env.games.registry import game_rule_sets, game_rules

ALIVE = "alive"
Choices = Literal["alive", "alive-others", "alive-outside-team", "split", "yes-no"]
TARGETS = ("alive", "alive-others", "alive-outside-team")  # the choices that name a player
Channel = Literal["all", "team", "self"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


class Role(_Strict):
    """A part in a game. ``secret`` is told to its holder only (a word game's word); ``reserve`` is what a
    negotiator gets without a deal (private)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    team: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    knows_team: bool = False  # sees who else is on its team
    secret: str = ""
    reserve: int | None = None


class Phase(_Strict):
    name: str = Field(min_length=1)
    actors: list[str]
    actions: list[ActionType] = Field(min_length=1)
    order: Literal["round-robin", "simultaneous"] = "round-robin"
    rounds: int = Field(default=1, ge=1)
    choices: Choices | None = None
    verb: str = ""
    channel: Channel = "all"

    @model_validator(mode="after")
    def _shape(self) -> Phase:
        if not self.actors:
            raise ValueError("actors: a phase needs actors (role names, team names or 'alive')")
        if ActionType.leave in self.actions:
            raise ValueError("actions: nobody leaves a game; 'leave' is not a game action")
        if self.choices is not None and self.actions != [ActionType.action]:
            raise ValueError("choices: a phase with choices takes only 'action'")
        if self.choices in TARGETS and not self.verb:
            raise ValueError("verb: a phase that names a player needs a verb ('vote for')")
        return self

    @property
    def is_vote(self) -> bool:
        """A vote: a phase whose choices name players and whose verb starts with "vote" (the rules count these)."""
        return self.choices in ("alive", "alive-others") and self.verb.startswith("vote")


class GameSpec(_Strict):
    rules: str  # a game rule set of the registry: werewolf, undercover, negotiation, or one registered
    roles: list[Role] = Field(min_length=1)
    seats: list[str] = Field(min_length=2, max_length=8)
    phases: list[Phase] = Field(min_length=1)
    max_cycles: int = Field(default=4, ge=1)
    pot: int | None = Field(default=None, gt=0)  # negotiation: what the parties split

    @field_validator("rules")
    @classmethod
    def _known_rules(cls, name: str) -> str:
        known = [r.name for r in game_rule_sets()]
        if name not in known:
            raise ValueError(f"unknown rule set {name!r} (known: {', '.join(known)})")
        return name

    @model_validator(mode="after")
    def _references(self) -> GameSpec:
        roles = {r.name for r in self.roles}
        if len(roles) != len(self.roles):
            raise ValueError("roles: role names must be distinct")
        for i, seat in enumerate(self.seats):
            if seat not in roles:
                raise ValueError(f"seats[{i}]: unknown role {seat!r} (roles: {', '.join(sorted(roles))})")
        names = roles | {r.team for r in self.roles} | {ALIVE}
        for i, phase in enumerate(self.phases):
            for actor in phase.actors:
                if actor not in names:
                    raise ValueError(f"phases[{i}].actors: unknown role {actor!r} (roles, teams or 'alive')")
        game_rules(self.rules).check(self)
        return self

    def max_steps(self) -> int:
        """The most env steps the game can take: every phase of every cycle, each player acting alone."""
        per_cycle = sum(len(self.seats) * p.rounds if p.order == "round-robin" else 1 for p in self.phases)
        return self.max_cycles * per_cycle

    def role(self, seat: int) -> Role:
        return next(r for r in self.roles if r.name == self.seats[seat])

    def teams(self) -> list[str]:
        return list(dict.fromkeys(self.role(s).team for s in range(len(self.seats))))
