import json
import math

from sotopia_env.episodes.log import AgentSpec, EpisodeLog
from sotopia_env.episodes.report import build_report, plot_report, print_report, t_interval, wide_table
from sotopia_env.evaluators import AgentRating, DimensionScore, EpisodeRating


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
    assert wide_table(rep).row_count == 2


def test_only_unrated_gives_no_means(two_friends):
    rep = build_report([make_log(two_friends, ["m", "p"], status="unrated")])
    assert rep.rows[0].cells == {} and rep.rows[0].unrated == 1


def seven_dimension_logs(setup, models):
    """Rated episodes of every model pair, on the seven SOTOPIA-EVAL dimensions, with distinct scores."""
    from sotopia_env.evaluators import SOTOPIA_DIMENSIONS

    a, b = setup.agent_names
    logs = []
    for i, (m1, m2) in enumerate((m1, m2) for m1 in models for m2 in models):
        scores = {
            name: AgentRating(
                scores={d.name: DimensionScore(score=(seat + i + j) % 5 - (5 if d.low < 0 else 0))
                        for j, d in enumerate(SOTOPIA_DIMENSIONS)}
            )
            for seat, name in enumerate((a, b))
        }  # fmt: skip
        logs.append(
            EpisodeLog(
                setup=setup,
                agents=[AgentSpec(name=a, model=m1, agent_class="X"), AgentSpec(name=b, model=m2, agent_class="X")],
                status="rated",
                rating=EpisodeRating(evaluator="hand", ratings=scores),
                tag="t",
            )
        )
    return logs


def printed(rep, width):
    from rich.console import Console

    console = Console(width=width, record=True, force_terminal=False)
    print_report(rep, console)
    return console.export_text()


def test_report_fits_80_columns_and_keeps_the_wide_layout_where_it_fits(two_friends):
    models = ["openai/gpt-4o-mini", "Qwen/Qwen2.5-7B-Instruct", "smollm2-135m"]
    rep = build_report(seven_dimension_logs(two_friends, models), tag="t")
    narrow = printed(rep, 80)
    lines = narrow.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in narrow
    # dimensions are rows: every dimension name appears whole at the start of a row, and every mean is printed
    for dim in rep.dimensions:
        assert any(line.lstrip("│┃ ").startswith(dim + " ") for line in lines), dim
    for row in rep.rows:
        for cell in row.cells.values():
            assert f"{cell.mean:.2f} ±{(cell.high - cell.low) / 2:.2f}" in narrow
    assert "".join(narrow.split()).count("Qwen/Qwen2.5-7B-Instruct") == 1  # a long name may wrap, never cut

    wide = printed(rep, 400)
    assert "…" not in wide
    header = next(line for line in wide.splitlines() if "model" in line)
    assert all(d in header for d in rep.dimensions)  # models as rows, dimensions as columns
    assert len(wide.splitlines()) < len(lines)


def test_many_models_split_into_tables_that_fit(two_friends):
    models = [f"provider/model-number-{i}" for i in range(6)]
    rep = build_report(seven_dimension_logs(two_friends, models), tag="t")
    text = printed(rep, 80)
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    for row in rep.rows:
        assert "".join(text.split()).count(row.model) == 1
        assert f"{row.cells['goal'].mean:.2f}" in text
