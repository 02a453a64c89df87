"""Pairing characters with scenarios, honouring relationship and constraints."""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import combinations, permutations

from sotopia_env.episode_setup import EpisodeSetup
from sotopia_env.errors import UserError
from sotopia_env.library import Library
from sotopia_env.profiles import Character, Relationship, Scenario


class NoEligibleCharacters(UserError, ValueError):
    pass


MANY_SEATS = 3
MAX_DRAWS = 64  # distinct casts drawn for a scenario of MANY_SEATS or more (there are billions of orderings)


def eligible_setups(scenario: Scenario, library: Library) -> list[EpisodeSetup]:
    """Every (ordered) character assignment that fits a two-seat scenario, in a stable order; for three seats
    or more, up to ``MAX_DRAWS`` distinct casts drawn in a fixed order (``many_seat_setups``)."""
    if scenario.num_agents >= MANY_SEATS:
        return many_seat_setups(scenario, library)
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


def many_seat_setups(scenario: Scenario, library: Library, draws: int = MAX_DRAWS) -> list[EpisodeSetup]:
    """Distinct casts for a scenario of three seats or more: each seat takes a character its constraints admit,
    drawn by a generator seeded with the scenario's id (the same library, the same casts). Pairs that the
    relationships file knows keep their profile (``EpisodeSetup.pair_relationships``); the others follow the
    scenario's relationship, or its matrix."""
    chars = sorted(library.characters.values(), key=lambda c: c.id)
    cons = scenario.constraints or [None] * scenario.num_agents
    rng = random.Random(scenario.id)
    seen: set[tuple[str, ...]] = set()
    out: list[EpisodeSetup] = []
    for _ in range(draws * 4):
        cast: list[Character] = []
        for con in cons:
            fitting = [c for c in chars if c not in cast and (con is None or con.admits(c))]
            if not fitting:
                break
            cast.append(rng.choice(fitting))
        key = tuple(c.id for c in cast)
        if len(cast) < scenario.num_agents or key in seen:
            continue
        seen.add(key)
        pairs = [rel for a, b in combinations(cast, 2) if (rel := library.relationship_between(a.id, b.id)) is not None]
        out.append(EpisodeSetup(scenario=scenario, characters=cast, pair_relationships=pairs or None))
        if len(out) == draws:
            break
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


def sample_setup(
    library: Library,
    seed: int | None = None,
    scenario: Scenario | str | None = None,
    among: Sequence[Scenario] | None = None,
) -> EpisodeSetup:
    """One setup; a random scenario unless one is given, drawn from ``among`` (default ``library.select("all")``,
    so never a verifiable one, which needs a rule partner)."""
    rng = random.Random(seed)
    if isinstance(scenario, str):
        scenario = library.select([scenario])[0]
    if scenario is None:
        scenario = rng.choice(sorted(library.select("all") if among is None else among, key=lambda s: s.id))
    return sample_setups([scenario], library, 1, seed=rng.randrange(2**31))[0]
