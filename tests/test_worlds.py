"""Issue #57: every verifiable kind has headroom that only inference closes, and no short script reaches its ceiling.

Per kind, on the shipped instances and 20 drawn hidden types each (``episodes.baseline_goals``): the oracle beats
the heuristic by at least 3 goal points on dev and on test, and the heuristic beats random; the scripts that used to
solve the kinds (``agents/exploits.py``) score at most the heuristic. Each kind's own file tests its rules
(``tests/test_kind_*.py``); this one holds them all to the same bar, and covers the per-episode draw itself.
"""

from __future__ import annotations

import asyncio

import pytest

from sotopia_env.agents.exploits import ConcedeInOrder, ScheduleInverter, SlotLister, WorryEcho
from sotopia_env.agents.loading import AgentSpecError, load_agent
from sotopia_env.agents.rule_specs import check_rule_specs
from sotopia_env.embedded_models import UnknownModel
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.baseline_goals import instance_goals, kind_setups
from sotopia_env.episodes.runner import play
from sotopia_env.evaluators import EpisodeContext, VerifiableJudge, aevaluate_safely
from sotopia_env.kinds import NotVerifiable, rule_sets

KINDS = sorted(k.name for k in rule_sets("verifiable"))
SEEDS = range(20)
HEADROOM = 3.0
EXPLOITS = {"persuasion": WorryEcho, "bargaining": ScheduleInverter, "scheduling": SlotLister, "split": ConcedeInOrder}


@pytest.fixture(scope="module")
def goals(library):
    cache: dict[tuple, float] = {}

    def mean(kind: str, split: str, policy) -> float:
        key = (kind, split, policy)
        if key not in cache:
            cache[key] = instance_goals(library, kind, split, policy, SEEDS).mean
        return cache[key]

    return mean


def test_every_kind_ships_dev_and_test_instances(library):
    assert {"bargaining", "scheduling", "persuasion", "split"} <= set(KINDS)
    for kind in KINDS:
        for split in ("dev", "test"):
            assert kind_setups(library, kind, split), f"{kind} has no {split} instance"


@pytest.mark.parametrize("split", ["dev", "test"])
@pytest.mark.parametrize("kind", KINDS)
def test_the_oracle_has_headroom_over_the_heuristic_which_beats_random(goals, kind, split):
    random_, heuristic, oracle = (goals(kind, split, f"baseline-{b}") for b in ("random", "heuristic", "oracle"))
    assert oracle - heuristic >= HEADROOM, f"{kind} {split}: oracle {oracle:.2f}, heuristic {heuristic:.2f}"
    assert heuristic > random_, f"{kind} {split}: heuristic {heuristic:.2f}, random {random_:.2f}"
    assert oracle >= 9.0, f"{kind} {split}: the oracle should be at the ceiling, got {oracle:.2f}"


@pytest.mark.parametrize("split", ["dev", "test"])
@pytest.mark.parametrize("kind", sorted(EXPLOITS))
def test_the_old_exploit_scripts_score_at_most_the_heuristic(goals, kind, split):
    script = goals(kind, split, EXPLOITS[kind])
    heuristic = goals(kind, split, "baseline-heuristic")
    assert script <= heuristic, f"{EXPLOITS[kind].__name__} on {kind} {split}: {script:.2f} > heuristic {heuristic:.2f}"


def _episode(library, kind: str, policy: str, seed: int):
    setup = kind_setups(library, kind, "dev")[0]
    agents = [load_agent(policy), load_agent("rule-partner")]
    return asyncio.run(play(setup, agents, VerifiableJudge(), EnvConfig(max_turns=20), seed=seed))


@pytest.mark.parametrize("kind", KINDS)
def test_the_hidden_type_is_drawn_per_episode_stored_and_judged_again_alike(library, kind):
    logs = [_episode(library, kind, "baseline-heuristic", seed) for seed in range(12)]
    drawn = [log.setup.scenario.verifiable for log in logs]
    assert all(f.hidden_seed is not None for f in drawn)
    hidden = {f.model_dump_json(exclude={"hidden_seed"}) for f in drawn}
    assert len(hidden) > 1, f"{kind}: 12 episodes met one hidden type"
    again = _episode(library, kind, "baseline-heuristic", 3)  # the same seed: the same draw, the same words
    assert again.setup.scenario.verifiable == drawn[3]
    assert [t.action for t in again.turns] == [t.action for t in logs[3].turns]
    log = logs[5]  # the stored facts alone judge it: the same verdict from the log
    context = EpisodeContext(setup=log.setup, turns=log.turns, termination_reason=log.termination_reason or "")
    rating = asyncio.run(aevaluate_safely(VerifiableJudge(), context))
    assert rating.ratings == log.rating.ratings


def test_baseline_specs_play_seat_one_of_verifiable_scenarios_only(library, two_friends):
    bike = library.scenarios["verifiable-bargaining-bike"]
    check_rule_specs([bike], ["baseline-oracle", "rule-partner"], "verifiable")
    with pytest.raises(AgentSpecError, match="baseline-random plays seat 1 only"):
        check_rule_specs([bike], ["x", "baseline-random"], "verifiable")
    with pytest.raises(NotVerifiable, match="baseline-heuristic"):
        check_rule_specs([two_friends.scenario], ["baseline-heuristic", "x"], "none")
    with pytest.raises(UnknownModel, match="did you mean 'baseline-oracle'"):
        load_agent("baseline-oracl")


def test_a_baseline_is_a_cli_agent_and_its_episode_is_judged(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from sotopia_env.cli.main import app
    from sotopia_env.episodes.store import open_store

    monkeypatch.setenv("SOTOPIA_ENV_STORE", f"sqlite:///{tmp_path / 'e.db'}")
    args = ["benchmark", "--model", "baseline-oracle", "--partner", "rule-partner", "--evaluator", "verifiable"]
    result = CliRunner().invoke(
        app, [*args, "--scenarios", "verifiable:bargaining:dev", "--episodes-per-scenario", "2"]
    )
    assert result.exit_code == 0, result.output
    logs = open_store().query()
    assert len(logs) == 8 and all(log.status == "rated" for log in logs)
    assert all(log.rating.ratings[log.setup.agent_names[0]].scores["goal"].score == 10 for log in logs)
