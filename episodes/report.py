"""Reports: per model and dimension, the mean with a 95% t-interval and n.

Every seat of a rated episode contributes one value to its model's row.
Unrated and failed episodes contribute nothing to the means; they are counted
separately, so a missing rating can never pull a mean toward 0.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from sotopia_env.episodes.log import EpisodeLog


@dataclass
class Cell:
    mean: float
    low: float
    high: float
    n: int


def t_interval(values: list[float], confidence: float = 0.95) -> Cell:
    """Mean and two-sided t-interval; the interval is NaN-wide with fewer than two values."""
    n = len(values)
    if n == 0:
        return Cell(math.nan, math.nan, math.nan, 0)
    mean = sum(values) / n
    if n == 1:
        return Cell(mean, math.nan, math.nan, 1)
    from scipy.stats import t

    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t.ppf((1 + confidence) / 2, n - 1) * sd / math.sqrt(n)
    return Cell(mean, mean - half, mean + half, n)


@dataclass
class ModelRow:
    model: str
    episodes: int = 0
    rated: int = 0
    unrated: int = 0
    failed: int = 0
    cells: dict[str, Cell] = field(default_factory=dict)


@dataclass
class Report:
    tag: str | None
    dimensions: list[str]
    rows: list[ModelRow]

    def to_dict(self) -> dict:
        return json_safe({"tag": self.tag, "dimensions": self.dimensions, "rows": [asdict(r) for r in self.rows]})


def json_safe(x: Any) -> Any:
    """``x`` with every NaN (an interval of fewer than two values) as None, for JSON."""
    if isinstance(x, float) and math.isnan(x):
        return None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [json_safe(v) for v in x]
    return x


@dataclass(frozen=True)
class SeatResult:
    """What a report takes from one seat of one episode: its model, status and scores (None unless rated)."""

    model: str
    seat: int
    status: str
    scores: dict[str, float] | None


def seat_results(log: EpisodeLog) -> Iterator[SeatResult]:
    ratings = log.rating.ratings if log.rating is not None else None
    for seat, spec in enumerate(log.agents):
        scores = None
        if log.status != "failed" and ratings is not None and spec.name in ratings:  # a seat may be unrated
            scores = {dim: float(s.score) for dim, s in ratings[spec.name].scores.items()}
        yield SeatResult(spec.model, seat, log.status, scores)


def aggregate(results: Iterable[SeatResult], tag: str | None = None, group_by_seat: bool = False) -> Report:
    """The one aggregation behind every report. ``group_by_seat`` keys rows by ``model@seat`` instead of model."""
    values: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    rows: dict[str, ModelRow] = {}
    dims: list[str] = []
    for result in results:
        key = f"{result.model}@{result.seat + 1}" if group_by_seat else result.model
        row = rows.setdefault(key, ModelRow(key))
        row.episodes += 1
        if result.status == "failed":
            row.failed += 1
            continue
        if result.scores is None:
            row.unrated += 1
            continue
        row.rated += 1
        for dim, score in result.scores.items():
            if dim not in dims:
                dims.append(dim)
            values[key][dim].append(score)
        values[key]["overall"].append(sum(result.scores.values()) / len(result.scores))
    dims = [*dims, "overall"] if dims else []
    for key, row in rows.items():
        row.cells = {d: t_interval(values[key][d]) for d in dims if values[key][d]}
    return Report(tag=tag, dimensions=dims, rows=sorted(rows.values(), key=lambda r: r.model))


def build_report(logs: Iterable[EpisodeLog], tag: str | None = None, group_by_seat: bool = False) -> Report:
    """Aggregate episodes. ``group_by_seat`` keys rows by ``model@seat`` instead of model."""
    return aggregate((r for log in logs for r in seat_results(log)), tag, group_by_seat)


def _half_width(cell: Cell) -> str:
    return "" if math.isnan(cell.low) else f" ±{(cell.high - cell.low) / 2:.2f}"


def format_cell(cell: Cell | None, with_n: bool = True) -> str:
    """``mean ±half-width (n=N)``; '-' for no cell."""
    if cell is None:
        return "-"
    n = f" (n={cell.n})" if with_n else ""
    return f"{cell.mean:.2f}{_half_width(cell)}{n}"


def wide_table(report: Report, title: str | None = None):
    """One row per model, one column per dimension."""
    from rich.table import Table

    table = Table("model", *report.dimensions, "rated", "unrated", "failed", title=title or f"tag: {report.tag}")
    for row in report.rows:
        table.add_row(
            row.model,
            *(format_cell(row.cells.get(d)) for d in report.dimensions),
            str(row.rated),
            str(row.unrated),
            str(row.failed),
        )
    return table


def tall_table(report: Report, rows: list[ModelRow] | None = None, title: str | None = None):
    """One row per dimension, one column per model (for narrow terminals). n is a row of its own."""
    from rich.table import Table

    rows = report.rows if rows is None else rows
    table = Table("dimension", title=title or f"tag: {report.tag}")
    for row in rows:
        table.add_column(row.model, justify="right", overflow="fold")
    for dim in report.dimensions:
        table.add_row(dim, *(format_cell(r.cells.get(dim), with_n=_n_differs(r)) for r in rows))
    table.add_section()
    for label in ("rated", "unrated", "failed"):
        table.add_row(label, *(str(getattr(r, label)) for r in rows))
    return table


def _n_differs(row: ModelRow) -> bool:
    """Whether a model's dimensions have different n (then each cell says its n; else the 'rated' row does)."""
    return len({cell.n for cell in row.cells.values()}) > 1 or any(c.n != row.rated for c in row.cells.values())


def _measure(table) -> int:
    from rich.console import Console

    return Console(width=10_000).measure(table).maximum


def report_tables(report: Report, width: int, title: str | None = None) -> list:
    """The report as rich tables that fit ``width`` columns: the wide layout where it fits, else dimensions as
    rows and models as columns, split into as many tables as the models need."""
    wide = wide_table(report, title)
    if _measure(wide) <= width or not report.rows:
        return [wide]
    tables, chunk = [], []
    for row in report.rows:
        if chunk and _measure(tall_table(report, [*chunk, row])) > width:
            tables.append(tall_table(report, chunk, title))
            chunk = []
        chunk.append(row)
    tables.append(tall_table(report, chunk, title))
    return tables


def print_report(report: Report, console, title: str | None = None) -> None:
    """Print the report so that every number is readable in ``console``'s width."""
    for table in report_tables(report, console.width, title):
        console.print(table)


def dimension_ranges(dims: list[str]) -> dict[str, tuple[float, float]]:
    """Each SOTOPIA-EVAL dimension's scale, and ``overall``'s (the mean of the lows to the mean of the highs) where
    every other dimension is one of SOTOPIA's; a custom dimension has none here."""
    from sotopia_env.evaluators.dimensions import SOTOPIA_DIMENSIONS

    known = {d.name: (float(d.low), float(d.high)) for d in SOTOPIA_DIMENSIONS}
    ranges = {d: known[d] for d in dims if d in known}
    scored = [d for d in dims if d != "overall"]
    if "overall" in dims and scored and all(d in known for d in scored):
        ranges["overall"] = (
            sum(known[d][0] for d in scored) / len(scored),
            sum(known[d][1] for d in scored) / len(scored),
        )
    return ranges


def error_bar(cell: Cell | None, scale: tuple[float, float] | None) -> tuple[float, float]:
    """How far a cell's 95% interval reaches below and above its mean, clipped to the dimension's scale (a
    t-interval of few ratings can run past it: -7.5 to 21 on a 0..10 scale)."""
    if cell is None or math.isnan(cell.low) or math.isnan(cell.mean):
        return 0.0, 0.0
    low, high = cell.low, cell.high
    if scale is not None:
        low, high = max(low, scale[0]), min(high, scale[1])
    return max(0.0, cell.mean - low), max(0.0, high - cell.mean)


def plot_report(report: Report, path: str) -> None:
    """A PNG bar chart: dimensions on the x axis, one bar per model, 95% intervals as error bars, clipped to each
    dimension's scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = report.dimensions
    ranges = dimension_ranges(dims)
    width = 0.8 / max(1, len(report.rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(dims)), 4.5))
    for i, row in enumerate(report.rows):
        xs = [j + i * width for j in range(len(dims))]
        means = [row.cells[d].mean if d in row.cells else math.nan for d in dims]
        below, above = zip(*(error_bar(row.cells.get(d), ranges.get(d)) for d in dims), strict=True)
        ax.bar(xs, means, width, yerr=[below, above], capsize=3, label=row.model)
    ax.set_xticks([j + width * (len(report.rows) - 1) / 2 for j in range(len(dims))])
    ax.set_xticklabels(dims, rotation=30, ha="right")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_title(f"SOTOPIA-EVAL by model (tag {report.tag}), 95% t-intervals")
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
