"""``episodes evaluate --judge``: judges' agreement, seat bias, resuming, and the figure a protocol card carries."""

from __future__ import annotations

import json

import numpy as np
import pytest
from biased_judges import BiasedJudges
from episode_fixtures import make_episodes
from loopback_openai import LoopbackOpenAI
from typer.testing import CliRunner

from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.cli.main import app
from sotopia_env.episodes.judge_agreement import (
    OVERALL,
    agreement_report,
    bootstrap_over_episodes,
    interval_alpha,
    spearman,
)
from sotopia_env.episodes.judge_ratings import records_name, seats_reversed, stored_ratings
from sotopia_env.episodes.leaderboard import leaderboard
from sotopia_env.episodes.protocol import judge_sha256
from sotopia_env.episodes.store import open_store
from sotopia_env.evaluators import GOAL_ONLY, AgentRating, DimensionScore, EpisodeContext, EpisodeRating, LLMEvaluator

runner = CliRunner()


def invoke(*args: object):
    return runner.invoke(app, [str(a) for a in args])


# -- the statistics -------------------------------------------------------------------------------------------


def test_alpha_and_rho_on_known_values():
    import krippendorff

    # Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", section C: interval alpha = 0.849.
    nan = np.nan
    published = [
        [1, 2, 3, 3, 2, 1, 4, 1, 2, nan, nan, nan],
        [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, nan, 3],
        [nan, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, nan],
        [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, nan],
    ]
    assert round(krippendorff.alpha(reliability_data=published, level_of_measurement="interval"), 3) == 0.849
    a, b = np.array([0.0, 1, 2, 3]), np.array([1.0, 2, 3, 4])
    # One judge a point above the other: the same ranking (rho 1), not the same numbers. By hand: observed
    # disagreement mean((a - b)^2) = 1, expected 2 * var([0,1,2,3,1,2,3,4], ddof=1) = 24/7, so alpha = 1 - 7/24.
    assert spearman(a, b) == pytest.approx(1.0)
    assert interval_alpha(a, b) == pytest.approx(1 - 7 / 24)
    assert interval_alpha(a, a) == pytest.approx(1.0)
    assert np.isnan(spearman(a, np.full(4, 5.0)))  # one value for every unit: no ranking
    assert np.isnan(interval_alpha(np.full(4, 5.0), np.full(4, 5.0)))


def test_bootstrap_resamples_whole_episodes():
    episode_of_unit = np.repeat(np.arange(20), 2)
    values = np.where(np.arange(40) % 2 == 0, 1.0, -1.0)  # each episode: +1 and -1, mean 0 inside every episode

    def mean(units):
        return [float(np.mean(values[units]))]

    (estimate,) = bootstrap_over_episodes(episode_of_unit, mean, resamples=200)
    assert estimate.value == pytest.approx(0.0)
    assert estimate.low == pytest.approx(0.0) and estimate.high == pytest.approx(0.0)  # units were never split
    (alone,) = bootstrap_over_episodes(np.zeros(2, dtype=int), mean, resamples=200)
    assert alone.value == pytest.approx(0.0) and alone.low is None  # one episode: no interval


def _rating(log, scores: dict[str, int], evaluator: str = "llm:x") -> EpisodeRating:
    ratings = {name: AgentRating(scores={"goal": DimensionScore(score=score)}) for name, score in scores.items()}
    return EpisodeRating(evaluator=evaluator, ratings=ratings)


def test_offset_and_seat_bias_are_recovered_exactly_and_unrated_is_never_zero():
    logs = make_episodes(12, tag="t")
    truth = {log.id: {a.name: 2 + (i * 3 + s * 5) % 5 for s, a in enumerate(log.agents)} for i, log in enumerate(logs)}
    ratings = {("a", "as-played"): {}, ("a", "reversed"): {}, ("b", "as-played"): {}}
    for log in logs:
        first, last = log.agents[0].name, log.agents[1].name
        t = truth[log.id]
        ratings[("a", "as-played")][log.id] = _rating(log, {first: t[first] + 2, last: t[last]})  # favours first
        ratings[("a", "reversed")][log.id] = _rating(log, {first: t[first], last: t[last] + 2})
        ratings[("b", "as-played")][log.id] = _rating(log, {first: t[first] + 3, last: t[last] + 3})
    broken = logs[0].id
    ratings[("b", "as-played")][broken] = EpisodeRating(evaluator="llm:b", error="no valid rating after 3 attempts")
    report = agreement_report("t", logs, ratings, ["a", "b"], resamples=100)
    goal = next(r for r in report.pairs if r.dimension == "goal")
    assert goal.units == 22 and goal.episodes == 11  # the unrated episode's two seats are out, not zeros
    assert goal.mean_difference.value == pytest.approx(1 - 3)  # half the first-seat bonus, minus B's offset
    bias = {(r.judge, r.dimension): r for r in report.seat_bias}
    assert bias[("a", "goal")].bias.value == pytest.approx(2.0) and bias[("a", "goal")].episodes == 12
    assert bias[("a", "goal")].bias.low == pytest.approx(2.0) and bias[("a", "goal")].bias.high == pytest.approx(2.0)
    assert ("b", "goal") not in bias  # no reversed ratings: not measured, not 0
    counts = {(c.judge, c.seats): c for c in report.counts}
    assert counts[("b", "as-played")].unrated == 1 and counts[("b", "as-played")].rated == 11
    assert "no valid rating" in counts[("b", "as-played")].errors[0]
    assert report.dimensions == ["goal", OVERALL]


# -- the seat-order option of the LLM judge ---------------------------------------------------------------------


def test_reversed_seats_prompt_and_ratings_map_back(two_friends):
    first, second = two_friends.agent_names
    logs = make_episodes(1)
    context = EpisodeContext(setup=two_friends, turns=logs[0].turns[:0], termination_reason="stale")
    reply = json.dumps(
        {"agent_1": {"goal": {"reasoning": "", "score": 9}}, "agent_2": {"goal": {"reasoning": "", "score": 3}}}
    )
    backend = ScriptedBackend([reply, reply])
    judge = LLMEvaluator(backend, dimensions=GOAL_ONLY)
    flipped = seats_reversed(judge)
    as_played, reversed_ = judge.evaluate(context), flipped.evaluate(context)
    assert as_played.ratings[first].scores["goal"].score == 9 and as_played.ratings[second].scores["goal"].score == 3
    assert reversed_.ratings[second].scores["goal"].score == 9 and reversed_.ratings[first].scores["goal"].score == 3
    played_prompt, reversed_prompt = (r.messages[1]["content"] for r in backend.requests)
    assert f"agent_1 = {first}, agent_2 = {second}" in played_prompt
    assert f"agent_1 = {second}, agent_2 = {first}" in reversed_prompt
    assert reversed_prompt.index(f"Participant 1: Name: {second}") < reversed_prompt.index(
        f"Participant 2: Name: {first}"
    )
    assert judge.reverse_seats is False  # the copy is flipped, not the judge
    assert judge_sha256(flipped) != judge_sha256(judge)  # a card never mixes the two orders


# -- the command ------------------------------------------------------------------------------------------------


def test_two_loopback_judges_offset_and_seat_bias_recovered_and_resumed(tmp_path):
    db = tmp_path / "e.db"
    store = open_store(str(db))
    logs = make_episodes(24, tag="t")
    store.put_many(logs)
    broken = logs[5].setup.scenario.scenario
    judges = BiasedJudges(offset={"judge-b": 2}, first_seat_bonus={"judge-a": 2}, broken={"judge-b": (broken,)})
    common = ("--api-base", None, "--store", db, "--dimensions", "goal,relationship")
    with LoopbackOpenAI(judges, model_ids=("judge-a", "judge-b")) as srv:
        common = ("--api-base", srv.base_url, *common[2:])
        assert invoke("episodes", "evaluate", "--tag", "t", "--all", "--evaluator", "judge-a", *common).exit_code == 0
        stored_before = {log.id: log.model_dump_json() for log in store.iter("t")}
        srv.reset()
        out = tmp_path / "agreement.json"
        args = ("episodes", "evaluate", "--tag", "t", "--judge", "judge-a", "--judge", "judge-b", "--swap-seats")
        result = invoke(*args, "--resamples", 300, "--json", out, *common)
        assert result.exit_code == 0, result.output
        ratings = [r for r in srv.requests if r.get("max_tokens") != 1]  # the preflight probed each judge once
        assert len(srv.requests) - len(ratings) == 2
        assert len(ratings) == 24 * 4 + 2 * 2  # each judge, both orders; the broken one: 3 attempts each
        report = json.loads(out.read_text())
        goal = next(r for r in report["pairs"] if r["dimension"] == "goal")
        assert goal["units"] == 46  # the episode judge-b left unrated is out, never a 0
        diff = goal["mean_difference"]
        expected = 2 / 2 - 2  # judge-a's first-seat bonus, halved over two seats, minus judge-b's offset
        assert abs(diff["value"] - expected) < 0.35 and diff["low"] < expected < diff["high"]
        bias = {(r["judge"], r["dimension"]): r["bias"] for r in report["seat_bias"]}
        assert bias[("judge-a", "goal")]["low"] < 2 < bias[("judge-a", "goal")]["high"]
        assert abs(bias[("judge-a", "goal")]["value"] - 2) < 0.35
        assert bias[("judge-b", "goal")]["low"] < 0 < bias[("judge-b", "goal")]["high"]
        assert goal["spearman"]["value"] > goal["alpha"]["value"]  # an offset lowers alpha, not rho
        counts = {(c["judge"], c["seats"]): c for c in report["counts"]}
        assert counts[("judge-b", "as-played")]["unrated"] == 1 and "no valid rating" in result.output
        assert {log.id: log.model_dump_json() for log in store.iter("t")} == stored_before  # nothing overwritten

        srv.reset()  # a rerun reuses every valid rating: only the unrated episode is asked again
        again = invoke(*args, "--resamples", 300, *common)
        assert again.exit_code == 0, again.output
        ratings = [r for r in srv.requests if r.get("max_tokens") != 1]
        assert {r["model"] for r in ratings} == {"judge-b"} and len(ratings) == 2 * 3
        assert "reused 94 stored ratings" in again.output

    records = stored_ratings(store, "t")
    assert len(records) == 24 * 4 and records_name("t") == "judge-ratings:t"
    assert sum(not r.rating.rated for r in records.values()) == 2
    shown = invoke("report", "--tag", "t", "--store", db)
    assert "agreement" in shown.output and "vs llm:judge-b" in shown.output
    (board,) = leaderboard(store, ["t"])
    (figure,) = board.card.judge_agreement  # the card pins llm:judge-a: it carries judge-a's figure
    assert figure.other == "llm:judge-b" and figure.mean_difference.value == pytest.approx(diff["value"])


def test_judge_mode_refuses_bad_combinations(tmp_path):
    db = tmp_path / "e.db"
    open_store(str(db)).put_many(make_episodes(2, tag="t"))
    cases = [
        (("--judge", "rule-based", "--judge", "judge-b"), "--judge needs --tag"),
        (("--tag", "t", "--judge", "rule-based"), "give a second --judge, or --swap-seats"),
        (("--tag", "t", "--judge", "rule-based", "--judge", "rule-based"), "given twice"),
        (("--tag", "t", "--judge", "rule-based", "--evaluator", "rule-based"), "not both"),
        (("--tag", "t", "--judge", "rule-based", "--judge", "none"), "rates nothing"),
        (("--tag", "nope", "--judge", "rule-based", "--swap-seats"), "no episodes with tag 'nope'"),
        (("--swap-seats",), "go with --judge"),
    ]
    for args, message in cases:
        result = invoke("episodes", "evaluate", *args, "--store", db)
        assert result.exit_code == 1 and message in result.output, (args, result.output)
    alone = invoke("episodes", "evaluate", "--tag", "t", "--judge", "rule-based", "--swap-seats", "--store", db)
    assert alone.exit_code == 0 and "seat bias not measured" in alone.output


@pytest.mark.model
def test_embedded_judge_end_to_end_reports_unrated_honestly(tmp_path):
    db = tmp_path / "e.db"
    store = open_store(str(db))
    logs = make_episodes(2, tag="t", n_turns=4)
    store.put_many(logs)
    loopback = BiasedJudges(broken={"judge-b": (logs[1].setup.scenario.scenario,)})
    out = tmp_path / "agreement.json"
    with LoopbackOpenAI(loopback, model_ids=("judge-b",)) as srv:
        result = invoke(
            "episodes", "evaluate", "--tag", "t", "--judge", "smollm2-135m", "--judge", "judge-b", "--swap-seats",
            "--dimensions", "goal", "--resamples", 100, "--api-base", srv.base_url, "--store", db, "--json", out,
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    records = stored_ratings(store, "t")
    assert len(records) == 2 * 4
    counts = {(c["judge"], c["seats"]): c for c in report["counts"]}
    for (judge, seats), count in counts.items():
        mine = [r for r in records.values() if r.judge == judge and r.seats == seats]
        assert count["rated"] == sum(r.rating.rated for r in mine) and count["rated"] + count["unrated"] == 2
    assert counts[("judge-b", "as-played")]["unrated"] == 1  # the loopback judge's broken episode, counted
    both = sum(
        1
        for log in logs
        for agent in log.agents
        if all(
            (r := records[f"{judge}|as-played|{log.id}"].rating).rated and r.of(agent.name) is not None
            for judge in ("smollm2-135m", "judge-b")
        )
    )
    goal = next(r for r in report["pairs"] if r["dimension"] == "goal")
    assert goal["units"] == both <= 2  # only seats both judges rated; an unrated one never enters as 0
    assert {r["judge"] for r in report["seat_bias"]} == {"smollm2-135m", "judge-b"}
    assert "llm:smollm2-135m" in {r.evaluator for r in records.values()}
