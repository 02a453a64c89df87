import json
import math

from episodes.log import AgentSpec, EpisodeLog
from episodes.report import build_report, plot_report, report_table, t_interval
from sotopia_env.evaluation import AgentRating, DimensionScore, EpisodeRating


def make_log(setup, models, goals=None, status="rated"):
    a, b = setup.agent_names
    rating = None
    if status == "rated":
        rating = EpisodeRating(
            evaluator="hand",
            ratings={
                name: AgentRating(scores={"goal": DimensionScore(score=g), "believability": DimensionScore(score=8)})
                for name, g in zip((a, b), goals, strict=True)
            },
        )
    elif status == "unrated":
        rating = EpisodeRating(evaluator="hand", error="judge returned garbage")
    return EpisodeLog(
        setup=setup,
        agents=[
            AgentSpec(name=a, model=models[0], agent_class="X"),
            AgentSpec(name=b, model=models[1], agent_class="X"),
        ],
        status=status,
        rating=rating,
        error="boom" if status == "failed" else None,
        tag="t",
    )


def test_t_interval_by_hand():
    cell = t_interval([2.0, 4.0, 6.0])
    # mean 4, sd 2, t(0.975, 2) = 4.302652729911275, half = 4.3026527 * 2 / sqrt(3)
    assert cell.mean == 4.0 and cell.n == 3
    assert math.isclose(cell.high - 4.0, 4.302652729911275 * 2 / math.sqrt(3), rel_tol=1e-9)
    assert math.isnan(t_interval([5.0]).low)


def test_report_matches_hand_computation_and_ignores_unrated(two_friends, tmp_path):
    logs = [
        make_log(two_friends, ["m", "p"], [2, 9]),
        make_log(two_friends, ["p", "m"], [7, 4]),
        make_log(two_friends, ["m", "p"], [6, 1]),
        make_log(two_friends, ["m", "p"], status="unrated"),
        make_log(two_friends, ["m", "p"], status="failed"),
    ]
    rep = build_report(logs, tag="t")
    m = next(r for r in rep.rows if r.model == "m")
    # m's goals: 2, 4, 6 -> mean 4; unrated/failed are counted, not averaged in as 0.
    assert m.cells["goal"].mean == 4.0 and m.cells["goal"].n == 3
    assert math.isclose(m.cells["goal"].high, 4 + 4.302652729911275 * 2 / math.sqrt(3))
    assert (m.rated, m.unrated, m.failed, m.episodes) == (3, 1, 1, 5)
    # overall = mean(goal, believability) per seat: (2+8)/2, (4+8)/2, (6+8)/2 -> 6
    assert m.cells["overall"].mean == 6.0
    p = next(r for r in rep.rows if r.model == "p")
    assert math.isclose(p.cells["goal"].mean, (9 + 7 + 1) / 3)
    assert rep.dimensions == ["goal", "believability", "overall"]
    data = json.loads(json.dumps(rep.to_dict()))
    assert data["rows"][0]["cells"]["goal"]["n"] == 3
    png = tmp_path / "r.png"
    plot_report(rep, str(png))
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert report_table(rep).row_count == 2


def test_only_unrated_gives_no_means(two_friends):
    rep = build_report([make_log(two_friends, ["m", "p"], status="unrated")])
    assert rep.rows[0].cells == {} and rep.rows[0].unrated == 1
