"""``EpisodeSetup``: everything an episode starts from, a scenario and one character per seat.

``sotopia_env.sampler`` draws setups from the library; the env, the evaluator, the episode log and the
training data all take one.
"""

from __future__ import annotations

import hashlib
import inspect
from typing import Any

from pydantic import BaseModel, model_serializer

from sotopia_env.profiles import Character, Relationship, RelationshipProfile, Scenario


class EpisodeSetup(BaseModel):
    """Everything an episode starts from: a scenario and one character per seat."""

    scenario: Scenario
    characters: list[Character]
    relationship: RelationshipProfile | None = None  # two seats: the profile the pair was drawn for
    pair_relationships: list[RelationshipProfile] | None = None  # 3+ seats: the pairs the relationships file knows

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Any) -> dict[str, Any]:
        data = handler(self)  # a two-seat setup stores as it did before pair_relationships existed
        if data.get("pair_relationships") is None:
            data.pop("pair_relationships", None)
        return data

    @property
    def agent_names(self) -> list[str]:
        return [c.name for c in self.characters]

    def relationship_between(self, a: int, b: int) -> Relationship:
        """How the characters in seats ``a`` and ``b`` know each other: the relationships file's profile of the
        pair where there is one, else the scenario's (its matrix, or its one relationship)."""
        profile = self.profile_between(a, b)
        return profile.relationship if profile is not None else self.scenario.relationship_at(a, b)

    def profile_between(self, a: int, b: int) -> RelationshipProfile | None:
        """The relationships file's profile of the characters in seats ``a`` and ``b``, where it has one."""
        if self.relationship is not None:
            return self.relationship
        ids = (self.characters[a].id, self.characters[b].id)
        return next((p for p in self.pair_relationships or [] if p.involves(*ids)), None)

    @property
    def pairing_key(self) -> str:
        """Identifies the (scenario, characters) pairing; ``episodes.log.combo_key`` adds models and repeat."""
        return "|".join([self.scenario.id, *(c.id for c in self.characters)])

    def drawn_with(self, seed: int | None) -> EpisodeSetup:
        """This setup with its scenario's hidden type drawn for the episode's ``seed`` (a verifiable scenario whose
        kind has a distribution: ``Kind.draw``); any other setup, or one already drawn, is returned as it is.

        The draw's seed mixes the pairing (scenario and characters) with ``seed``, so repeats and pairings of one
        instance meet different hidden types, and the same episode always meets the same one."""
        facts = self.scenario.verifiable
        if facts is None or facts.hidden_seed is not None:
            return self
        from sotopia_env.kinds.registry import kind_for

        key = f"{self.pairing_key}|{0 if seed is None else seed}".encode()
        drawn = kind_for(facts).drawn_facts(facts, int.from_bytes(hashlib.sha256(key).digest()[:4], "big"))
        return self.model_copy(update={"scenario": self.scenario.model_copy(update={"verifiable": drawn})})

    def check(self) -> None:
        """Raise ValueError if the setup breaks the scenario's seat count, constraints or names."""
        s = self.scenario
        if len(self.characters) != s.num_agents:
            raise ValueError(f"scenario {s.id!r} needs {s.num_agents} characters, got {len(self.characters)}")
        if len({c.name for c in self.characters}) != len(self.characters):
            raise ValueError(f"scenario {s.id!r}: characters must have distinct names")
        for seat, (c, con) in enumerate(zip(self.characters, s.constraints or [], strict=False)):
            if not con.admits(c):
                raise ValueError(f"scenario {s.id!r}: character {c.id!r} does not fit seat {seat}'s constraints")


def reset_for_episode(agent: object, setup: EpisodeSetup | None, seat: int | None, seed: int | None = None) -> None:
    """Call ``agent.reset`` if it has one: with ``setup=`` and ``seat=`` where it takes them (the rule partner reads
    the scenario's hidden facts there), and the episode's ``seed=`` where it takes that too (a game's rule player
    plays by it), else with no arguments."""
    reset = getattr(agent, "reset", None)
    if not callable(reset):
        return
    params = inspect.signature(reset).parameters
    if "setup" in params and "seat" in params:
        reset(setup=setup, seat=seat, **({"seed": seed} if "seed" in params else {}))
    else:
        reset()
