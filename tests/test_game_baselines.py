"""Game baselines with spread (issue #44 part 5): seeded, stochastic rule players that keep to what their seat
knows. No model: every game here is played by rule players, so the file takes seconds."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from sotopia_env.agents.game_players import RulePlayer
from sotopia_env.episodes.game_report import role_win_rates, wilson
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import VerifiableJudge
from sotopia_env.games.players import player_rng
from sotopia_env.kinds import rule_set
from sotopia_env.kinds.base import GAME
from sotopia_env.observation import Observation
from sotopia_env.sampler import sample_setups

PER_SCENARIO = 32  # game:test has three games of each kind: 96 games per role


def _play(setup, seed: int, agents=None):
    agents = agents or [RulePlayer() for _ in setup.agent_names]
    return asyncio.run(play(setup, agents, VerifiableJudge(), seed=seed))


def test_every_werewolf_and_undercover_role_wins_between_a_fifth_and_four_fifths_on_game_test(library) -> None:
    """game:test, rule players in every seat, a fixed set of setups and seeds: each role's share of games won
    lies in [0.2, 0.8], and so does its Wilson 95% interval's middle, counted in games (``role_win_rates``: a
    role's seats in one game count that game once); the negotiation's seats' goals vary."""
    goals: dict[str, set[int]] = defaultdict(set)
    logs = []
    for scenario in library.select("game:test"):
        for i, setup in enumerate(sample_setups([scenario], library, PER_SCENARIO, seed=0)):
            log = _play(setup, seed=i)
            assert log.rating is not None and log.rating.rated, scenario.id
            logs.append(log)
            if scenario.game.rules == "negotiation":
                for seat, name in enumerate(setup.agent_names):
                    goals[scenario.game.role(seat).name].add(log.rating.of(name).scores["goal"].score)
    rows = {(r.game, r.role): r for r in role_win_rates(logs)}
    elimination = {role: row for role, row in rows.items() if role[0] in ("werewolf", "undercover")}
    assert set(elimination) == {
        ("werewolf", "werewolf"),
        ("werewolf", "villager"),
        ("werewolf", "seer"),
        ("undercover", "civilian"),
        ("undercover", "undercover"),
    }
    for role, row in elimination.items():
        assert row.games == 3 * PER_SCENARIO, role  # games, not players: 3 instances x 32 games
        assert 0.2 <= row.rate <= 0.8 and 0.2 <= (row.low + row.high) / 2 <= 0.8, (role, row.wins, row.games)
    assert rows["werewolf", "seer"].wins == rows["werewolf", "villager"].wins  # one side: the same games won
    assert rows["werewolf", "werewolf"].wins + rows["werewolf", "villager"].wins == 3 * PER_SCENARIO
    assert set(goals) == {"proposer", "responder-a", "responder-b"}
    assert all(len(scores) >= 3 for scores in goals.values()), goals  # not one outcome repeated


def test_a_role_with_several_seats_counts_each_game_once(library) -> None:
    """The win rates ``report`` prints count games, not players: 4 werewolf games give the villagers (3 seats a
    game) and the wolves (2) n = 4 each, and the interval is Wilson's of those 4 games."""
    (scenario,) = library.select(["werewolf-ashford"])
    logs = [_play(setup, seed=i) for i, setup in enumerate(sample_setups([scenario], library, 4, seed=0))]
    rows = {r.role: r for r in role_win_rates(logs)}
    assert {role: row.games for role, row in rows.items()} == {"villager": 4, "seer": 4, "werewolf": 4}
    for row in rows.values():
        assert (row.low, row.high) == wilson(row.wins, 4)
    assert rows["villager"].wins + rows["werewolf"].wins == 4


@pytest.mark.parametrize("scenario_id", ["werewolf-fernhollow", "undercover-river-lake", "negotiation-prize-money"])
def test_same_episode_seed_same_game_and_other_seeds_other_games(library, scenario_id) -> None:
    (scenario,) = library.select([scenario_id])
    setup = sample_setups([scenario], library, 1, seed=0)[0]

    def transcript(seed: int) -> list[tuple[str, str]]:
        return [(t.agent, t.action.argument) for t in _play(setup, seed).turns]

    assert transcript(5) == transcript(5)
    assert len({tuple(transcript(seed)) for seed in range(6)}) > 1


class _Recorder(RulePlayer):
    """A rule player that keeps every observation it acted on."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Observation] = []

    async def act(self, observation):
        obs = Observation.from_env(observation)
        if obs.my_turn:
            self.seen.append(obs)
        return await super().act(obs)


def _decisions(game, names, seat: int, seen: list[Observation]) -> list[str]:
    """A fresh rule player of ``seat`` in ``game``, fed ``seen`` in order, with the episode's random stream."""
    player = rule_set(game.rules, GAME).player(game, names, seat, player_rng(3, "pairing", seat))
    return [player.choose(obs) if obs.choices else player.say(obs) for obs in seen]


@pytest.mark.parametrize(
    ("scenario_id", "seat", "role"),
    [("werewolf-ashford", 1, "villager"), ("werewolf-ashford", 2, "seer"), ("undercover-coffee-tea", 0, "civilian")],
)
def test_a_player_decides_on_what_it_observes_never_on_the_hidden_roles(library, scenario_id, seat, role) -> None:
    """Play a game, keep what one seat observed; then the same seat with the others' hidden roles permuted (its
    own role and observations unchanged) makes exactly the same moves."""
    (scenario,) = library.select([scenario_id])
    setup = sample_setups([scenario], library, 1, seed=0)[0]
    game = scenario.game
    assert game.seats[seat] == role
    for seed in range(20):  # an episode in which the seat lives long enough to say and choose several times
        agents = [_Recorder() for _ in setup.agent_names]
        _play(setup, seed=seed, agents=agents)
        seen = agents[seat].seen
        if len(seen) >= 4:
            break
    assert len(seen) >= 4 and any(o.choices for o in seen)
    others = [s for s in range(len(game.seats)) if s != seat]
    for shift in range(1, len(others)):  # every rotation of the other seats' roles
        seats = list(game.seats)
        for s, t in zip(others, others[shift:] + others[:shift], strict=True):
            seats[t] = game.seats[s]
        permuted = game.model_copy(update={"seats": seats})
        if permuted.seats == game.seats:
            continue
        names = setup.agent_names
        assert _decisions(permuted, names, seat, seen) == _decisions(game, names, seat, seen)


def test_a_villager_does_not_know_its_team(library) -> None:
    (scenario,) = library.select(["werewolf-ashford"])
    setup = sample_setups([scenario], library, 1, seed=0)[0]
    names = setup.agent_names
    villager = rule_set("werewolf", GAME).player(scenario.game, names, 1)
    wolf = rule_set("werewolf", GAME).player(scenario.game, names, 0)
    assert villager.team == [names[1]] and wolf.team == [names[0], names[4]]
