"""PettingZoo's contract: ``possible_agents`` never changes through play or resetting, ids are seats.

``parallel_api_test`` resets only with seed 0 and then without a seed (the same episode), so it never sees a
second scenario; here the env is reset with many seeds, and the test also runs on an env whose unseeded resets
draw a new scenario each time.
"""

from __future__ import annotations

import itertools
import random
import warnings

import pytest
from pettingzoo.test import parallel_api_test, parallel_seed_test

from sotopia_env.actions import ACTION_TYPES
from sotopia_env.env import EnvConfig, SocialEnv, seat_id
from sotopia_env.evaluators import RuleBasedEvaluator, VerifiableJudge
from sotopia_env.sampler import sample_setups

SEEDS = range(10)


def _setup(library, scenario_id: str, seed: int = 0):
    return sample_setups(library.select([scenario_id]), library, 1, seed=seed)[0]


class Reseeding(SocialEnv):
    """Each reset without a seed draws the next seed, so PettingZoo's own test plays several scenarios."""

    def reset(self, seed=None, options=None):
        if seed is None:
            self._seeds = getattr(self, "_seeds", itertools.count(1))
            seed = next(self._seeds)
        out = super().reset(seed=seed, options=options)
        self.seen = [*getattr(self, "seen", []), (self.setup.scenario.id, list(self.possible_agents))]
        return out


def _check_resets(env: SocialEnv, seats: int) -> set[str]:
    """``possible_agents`` (and the spaces) stay put across ``reset(seed=s)``; returns the scenarios drawn."""
    expected = [f"agent_{i}" for i in range(seats)]
    assert env.possible_agents == expected  # before the first reset too
    spaces = {a: (env.observation_space(a), env.action_space(a)) for a in expected}
    drawn = set()
    for seed in SEEDS:
        obs, infos = env.reset(seed=seed)
        assert env.possible_agents == expected
        names = env.setup.agent_names
        assert env.agents == expected[: len(names)]
        assert list(obs) == list(infos) == env.agents
        for index, seat in enumerate(env.agents):
            assert infos[seat]["name"] == obs[seat]["agent"] == names[index] == env.name_of(seat)
            assert env.seat_of(names[index]) == seat == seat_id(index)
            assert env.observation_space(seat) is spaces[seat][0] and env.action_space(seat) is spaces[seat][1]
            assert env.observation_space(seat).contains(obs[seat])
        assert set(env.acting) <= set(env.agents)
        drawn.add(env.setup.scenario.id)
    return drawn


def test_possible_agents_fixed_on_a_two_seat_setup(two_friends):
    _check_resets(SocialEnv(setup=two_friends), 2)


def test_possible_agents_fixed_on_the_library_sampler(library):
    drawn = _check_resets(SocialEnv(library=library), 2)
    assert len(drawn) >= 5  # it does draw different scenarios (and casts): the names change, the seats do not


def test_possible_agents_fixed_on_a_six_seat_game(library):
    env = SocialEnv(setup=_setup(library, "werewolf-ashford"))
    _check_resets(env, 6)
    assert "role" in env.reset(seed=0)[1]["agent_0"]


def test_a_pool_of_different_sizes_has_the_most_seats(library):
    """An env over several seat counts has the largest as its seats; a smaller episode fills a prefix."""
    env = SocialEnv(library=library, scenarios="game")
    drawn = _check_resets(env, 6)
    assert {library.scenarios[s].num_agents for s in drawn} > {6}  # smaller games were drawn too


def test_observation_space_bounds_every_game_of_the_pool(library):
    """The observation space is fixed for the env (built over every scenario it can draw), so a long game drawn
    after a short one still fits it."""
    env = SocialEnv(library=library, scenarios="game", config=EnvConfig(max_agent_errors=99))
    spaces = [env.observation_space(a) for a in env.possible_agents]
    for seed in (0, 1, 2, 3):
        rng = random.Random(seed)
        obs, infos = env.reset(seed=seed)
        while env.agents:
            for seat in env.agents:
                assert env.observation_space(seat).contains(obs[seat]), (seed, seat, obs[seat]["turn"])
            actions = {}
            for seat in env.agents:
                kinds = [k for k, on in zip(ACTION_TYPES, infos[seat]["action_mask"], strict=True) if on]
                choices = obs[seat]["choices"]
                actions[seat] = {"action_type": rng.choice(kinds), "argument": rng.choice(choices) if choices else "."}
            obs, _, _, _, infos = env.step(actions)
    assert [env.observation_space(a) for a in env.possible_agents] == spaces


@pytest.mark.parametrize("kind", ["library", "werewolf"])
def test_parallel_api_after_resets_with_several_seeds(library, kind):
    def make(cls=SocialEnv):
        if kind == "library":
            return cls(library=library, evaluator=RuleBasedEvaluator())
        config = EnvConfig(max_agent_errors=99)  # random moves are mostly invalid: play on through them
        return cls(setup=_setup(library, "werewolf-ashford"), evaluator=VerifiableJudge(), config=config)

    env = make()
    for seed in (3, 1, 4):
        env.reset(seed=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # PettingZoo reports API slips as warnings
            parallel_api_test(env, num_cycles=100)
    reseeding = make(Reseeding)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parallel_api_test(reseeding, num_cycles=100)
    assert len(reseeding.seen) >= 3 and all(seats == env.possible_agents for _, seats in reseeding.seen)
    if kind == "library":
        assert len({scenario for scenario, _ in reseeding.seen}) >= 2  # it played different scenarios
    parallel_seed_test(make, num_cycles=50)


def test_names_are_not_ids(two_friends):
    env = SocialEnv(setup=two_friends)
    env.reset()
    a, b = two_friends.agent_names
    with pytest.raises(ValueError, match="seat ids"):
        env.observe(a)
    with pytest.raises(ValueError, match="seat_of"):
        env.step({a: {"action_type": "speak", "argument": "hi"}, b: {"action_type": "none"}})
    # addressing keeps the names a character knows
    env.step({"agent_0": {"action_type": "speak", "argument": "hi", "to": [b]}, "agent_1": {"action_type": "none"}})
    assert env.turns[-1].agent == a and env.turns[-1].action.to == [b]


def test_an_episode_with_more_seats_than_the_env_is_refused(library, two_friends):
    env = SocialEnv(setup=two_friends)
    with pytest.raises(ValueError, match="seats"):
        env.reset(options={"setup": _setup(library, "werewolf-ashford")})
    env = SocialEnv(library=library)
    with pytest.raises(ValueError, match="seats"):
        env.reset(seed=0, options={"scenario": "werewolf-ashford"})
    env.reset(seed=0)
    with pytest.raises(ValueError, match="agent_2"):
        env.observe("agent_2")
