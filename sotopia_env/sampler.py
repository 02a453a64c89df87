"""Pairing characters with scenarios, honouring relationship and constraints."""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import permutations

from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.errors import UserError
from sotopia_env.library import Library
from sotopia_env.profiles import Character, Relationship, Scenario


class NoEligibleCharacters(UserError, ValueError):
    pass


def eligible_setups(scenario: Scenario, library: Library) -> list[EpisodeSetup]:
    """Every (ordered) character assignment that fits the scenario, in a stable order."""
    chars = sorted(library.characters.values(), key=lambda c: c.id)
    cons = scenario.constraints
    out: list[EpisodeSetup] = []

    def fits(seats: Sequence[Character]) -> bool:
        return all(con.admits(c) for c, con in zip(seats, cons or [], strict=False))

    if scenario.relationship == Relationship.stranger:
        for seats in permutations(chars, scenario.num_agents):
            if fits(seats) and (len(seats) != 2 or library.relationship_between(seats[0].id, seats[1].id) is None):
                out.append(EpisodeSetup(scenario=scenario, characters=list(seats)))
        return out
    if scenario.num_agents != 2:
        raise NoEligibleCharacters(f"scenario {scenario.id!r}: relationships are defined for two agents only")
    for rel in library.relationships:
        if rel.relationship != scenario.relationship:
            continue
        a, b = (library.characters[i] for i in rel.characters)
        for seats in ((a, b), (b, a)):
            if fits(seats):
                out.append(EpisodeSetup(scenario=scenario, characters=list(seats), relationship=rel))
    return out


def sample_setups(
    scenarios: Sequence[Scenario], library: Library, per_scenario: int = 1, seed: int = 0
) -> list[EpisodeSetup]:
    """``per_scenario`` distinct setups for each scenario (fewer if fewer exist). Same seed, same result."""
    rng = random.Random(seed)
    out = []
    for scenario in scenarios:
        options = eligible_setups(scenario, library)
        if not options:
            raise NoEligibleCharacters(f"scenario {scenario.id!r}: no characters fit its relationship and constraints")
        out.extend(rng.sample(options, min(per_scenario, len(options))))
    return out


def sample_setup(library: Library, seed: int | None = None, scenario: Scenario | str | None = None) -> EpisodeSetup:
    """One setup; a random scenario unless one is given (drawn from ``library.select("all")``, so never a
    verifiable one, which needs a rule partner)."""
    rng = random.Random(seed)
    if isinstance(scenario, str):
        scenario = library.select([scenario])[0]
    if scenario is None:
        scenario = rng.choice(sorted(library.select("all"), key=lambda s: s.id))
    return sample_setups([scenario], library, 1, seed=rng.randrange(2**31))[0]
