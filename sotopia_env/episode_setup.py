"""``EpisodeSetup``: everything an episode starts from, a scenario and one character per seat.

``sotopia_env.sampler`` draws setups from the library; the env, the evaluator, the episode log and the
training data all take one.
"""

from __future__ import annotations

import inspect

from pydantic import BaseModel

from sotopia_env.profiles import Character, RelationshipProfile, Scenario


class EpisodeSetup(BaseModel):
    """Everything an episode starts from: a scenario and one character per seat."""

    scenario: Scenario
    characters: list[Character]
    relationship: RelationshipProfile | None = None

    @property
    def agent_names(self) -> list[str]:
        return [c.name for c in self.characters]

    @property
    def pairing_key(self) -> str:
        """Identifies the (scenario, characters) pairing; ``episodes.log.combo_key`` adds models and repeat."""
        return "|".join([self.scenario.id, *(c.id for c in self.characters)])

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


def reset_for_episode(agent: object, setup: EpisodeSetup | None, seat: int | None) -> None:
    """Call ``agent.reset`` if it has one: with ``setup=`` and ``seat=`` where it takes them (the rule partner reads
    the scenario's hidden facts there), else with no arguments."""
    reset = getattr(agent, "reset", None)
    if not callable(reset):
        return
    params = inspect.signature(reset).parameters
    if "setup" in params and "seat" in params:
        reset(setup=setup, seat=seat)
    else:
        reset()
