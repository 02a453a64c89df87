"""How far judges agree, and whether a judge favours the first seat: the figures of ``episodes evaluate --judge``.

A unit is one agent of one episode. Per dimension, and ``overall`` (the mean of the dimensions every judge rated):

- between two judges, over the units both rated: Spearman's rho (``scipy.stats.spearmanr``: do they rank the agents
  alike?), Krippendorff's alpha at the interval level (the ``krippendorff`` package: do they give the same numbers?
  an offset between judges lowers alpha, not rho), and the mean difference, judge A minus judge B;
- per judge, its seat bias: the same episodes rated again with the seats presented last to first. A judge that adds
  b to whoever it reads first moves the first seat by -b and the last seat by +b when the order is reversed; the
  seat bias is half the difference, ((as played - reversed) of the first seat - the same of the last seat) / 2, per
  episode, averaged: the points a seat gains from being read first rather than last.

A seat a judge left unrated (``EpisodeRating.error``, or ``unrated`` for one seat) is excluded from every figure and
counted (``JudgeCount``), never a 0. Intervals are 95% percentile bootstraps over episodes (an episode's agents
are resampled together: one judge call rates them all), seeded, so a rerun prints the same figures.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timezone

import numpy as np
from pydantic import BaseModel, Field

from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.evaluators import EpisodeRating

OVERALL = "overall"
CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 1000
FIGURES = "judge-agreement"  # the store's keyed records of measured figures, which protocol cards carry


class Estimate(BaseModel):
    """A figure and its 95% interval; None where it is undefined (a judge that gave one value to every unit has no
    rank correlation; fewer than two episodes, no interval)."""

    value: float | None
    low: float | None = None
    high: float | None = None

    def text(self, signed: bool = False) -> str:
        if self.value is None:
            return "-"
        number = "{:+.2f}" if signed else "{:.2f}"
        if self.low is None or self.high is None:
            return number.format(self.value)
        return f"{number.format(self.value)} [{number.format(self.low)}, {number.format(self.high)}]"

    def negated(self) -> Estimate:
        def neg(x: float | None) -> float | None:
            return None if x is None else -x

        return Estimate(value=neg(self.value), low=neg(self.high), high=neg(self.low))


class PairRow(BaseModel):
    """Two judges on one dimension, over the units both rated."""

    dimension: str
    judge_a: str
    judge_b: str
    units: int
    episodes: int
    spearman: Estimate
    alpha: Estimate
    mean_difference: Estimate  # judge_a minus judge_b


class SeatBiasRow(BaseModel):
    """One judge's seat bias on one dimension, over the episodes it rated in both seat orders."""

    dimension: str
    judge: str
    episodes: int
    bias: Estimate  # points the first-read seat gains over being read last


class JudgeCount(BaseModel):
    """How many of the tag's episodes a judge rated in one seat order, how many it left (partly) unrated, and why."""

    judge: str
    seats: str
    rated: int
    unrated: int
    errors: list[str] = Field(default_factory=list)  # the first few distinct reasons


class AgreementReport(BaseModel):
    tag: str
    episodes: int
    judges: list[str]
    dimensions: list[str]
    resamples: int
    counts: list[JudgeCount]
    pairs: list[PairRow]
    seat_bias: list[SeatBiasRow]
    no_seat_order: list[str] = Field(default_factory=list)  # judges whose prompt has no seat order to reverse


Ratings = dict[tuple[str, str], dict[str, EpisodeRating]]  # (judge, seats) -> episode id -> rating


# -- the statistics -------------------------------------------------------------------------------------------


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho; NaN with fewer than two units or a judge that gave one value to all."""
    from scipy.stats import spearmanr

    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    return float(spearmanr(a, b).statistic)


def interval_alpha(a: np.ndarray, b: np.ndarray) -> float:
    """Krippendorff's alpha, interval metric, of two judges over paired units; NaN where undefined (fewer than two
    units, or one value in all)."""
    import krippendorff

    if len(a) < 2 or np.all(np.concatenate([a, b]) == a[0]):
        return math.nan
    return float(krippendorff.alpha(reliability_data=np.vstack([a, b]), level_of_measurement="interval"))


def _nan_to_none(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def bootstrap_over_episodes(
    episode_of_unit: np.ndarray,
    statistic: Callable[[np.ndarray], Sequence[float]],
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
) -> list[Estimate]:
    """``statistic(units)`` (a vector) on every unit, with 95% percentile intervals from resampling whole episodes
    (``scipy.stats.bootstrap``); no interval with fewer than two episodes or ``resamples=0``."""
    from scipy.stats import bootstrap

    point = [float(v) for v in statistic(np.arange(len(episode_of_unit)))]
    episodes = np.unique(episode_of_unit)
    if len(episodes) < 2 or resamples <= 0:
        return [Estimate(value=_nan_to_none(v)) for v in point]
    members = [np.flatnonzero(episode_of_unit == e) for e in episodes]

    def on_episodes(chosen: np.ndarray) -> np.ndarray:
        return np.asarray(statistic(np.concatenate([members[i] for i in chosen])), dtype=float)

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # an undefined resample (one value in all) is NaN, and so is its interval
        result = bootstrap(
            (np.arange(len(episodes)),),
            on_episodes,
            vectorized=False,
            n_resamples=resamples,
            confidence_level=CONFIDENCE,
            method="percentile",
            rng=np.random.default_rng(seed),
        )
    lows = np.atleast_1d(result.confidence_interval.low)
    highs = np.atleast_1d(result.confidence_interval.high)
    return [
        Estimate(value=_nan_to_none(v), low=_nan_to_none(lo), high=_nan_to_none(hi))
        if not math.isnan(v)
        else Estimate(value=None)
        for v, lo, hi in zip(point, lows, highs, strict=True)
    ]


# -- scores out of ratings ------------------------------------------------------------------------------------


def shared_dimensions(ratings: Iterable[EpisodeRating]) -> list[str]:
    """The dimensions every one of ``ratings`` scored (in the first one's order), then ``overall``."""
    shared: list[str] | None = None
    for rating in ratings:
        for agent_rating in (rating.ratings or {}).values():
            dims = list(agent_rating.scores)
            shared = dims if shared is None else [d for d in shared if d in dims]
    return [*shared, OVERALL] if shared else []


def seat_score(rating: EpisodeRating | None, agent: str, dimension: str, shared: Sequence[str]) -> float | None:
    """The agent's score on ``dimension`` (``overall``: the mean over ``shared``); None where unrated."""
    agent_rating = None if rating is None else rating.of(agent)
    if agent_rating is None:
        return None
    if dimension == OVERALL:
        return sum(agent_rating.scores[d].score for d in shared) / len(shared)
    return float(agent_rating.scores[dimension].score)


def _count(judge: str, seats: str, logs: Sequence[EpisodeLog], by_episode: dict[str, EpisodeRating]) -> JudgeCount:
    rated = unrated = 0
    errors: list[str] = []
    for log in logs:
        rating = by_episode.get(log.id)
        reasons = [] if rating is None else ([rating.error] if rating.error else list((rating.unrated or {}).values()))
        if rating is None:
            reasons = ["not rated (no record)"]
        if reasons:
            unrated += 1
            errors.extend(r for r in reasons if r not in errors)
        else:
            rated += 1
    return JudgeCount(judge=judge, seats=seats, rated=rated, unrated=unrated, errors=errors[:3])


def _pair_rows(
    logs: Sequence[EpisodeLog], a: str, b: str, ratings: Ratings, dims: list[str], resamples: int, seed: int
) -> list[PairRow]:
    rows = []
    shared = [d for d in dims if d != OVERALL]
    for dim in dims:
        xs, ys, episode = [], [], []
        for index, log in enumerate(logs):
            for spec in log.agents:
                x = seat_score(ratings[(a, "as-played")].get(log.id), spec.name, dim, shared)
                y = seat_score(ratings[(b, "as-played")].get(log.id), spec.name, dim, shared)
                if x is not None and y is not None:
                    xs.append(x)
                    ys.append(y)
                    episode.append(index)
        x_arr, y_arr = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)

        def stats(units: np.ndarray, x_arr: np.ndarray = x_arr, y_arr: np.ndarray = y_arr) -> list[float]:
            x, y = x_arr[units], y_arr[units]
            diff = float(np.mean(x - y)) if len(x) else math.nan
            return [spearman(x, y), interval_alpha(x, y), diff]

        rho, alpha, diff = bootstrap_over_episodes(np.asarray(episode, dtype=int), stats, resamples, seed)
        rows.append(
            PairRow(
                dimension=dim,
                judge_a=a,
                judge_b=b,
                units=len(xs),
                episodes=len(set(episode)),
                spearman=rho,
                alpha=alpha,
                mean_difference=diff,
            )
        )
    return rows


def _seat_bias_rows(
    logs: Sequence[EpisodeLog], judge: str, ratings: Ratings, dims: list[str], resamples: int, seed: int
) -> list[SeatBiasRow]:
    rows = []
    shared = [d for d in dims if d != OVERALL]
    played, reversed_ = ratings[(judge, "as-played")], ratings[(judge, "reversed")]
    for dim in dims:
        per_episode = []
        for log in logs:
            first, last = log.agents[0].name, log.agents[-1].name
            scores = [
                seat_score(by_order.get(log.id), name, dim, shared)
                for name in (first, last)
                for by_order in (played, reversed_)
            ]
            if all(s is not None for s in scores):
                p_first, r_first, p_last, r_last = scores  # type: ignore[misc]
                per_episode.append(((p_first - r_first) - (p_last - r_last)) / 2)
        values = np.asarray(per_episode, dtype=float)
        (bias,) = bootstrap_over_episodes(
            np.arange(len(values)),
            lambda units, values=values: [float(np.mean(values[units])) if len(units) else math.nan],
            resamples,
            seed,
        )
        rows.append(SeatBiasRow(dimension=dim, judge=judge, episodes=len(values), bias=bias))
    return rows


def agreement_report(
    tag: str,
    logs: Sequence[EpisodeLog],
    ratings: Ratings,
    judges: Sequence[str],
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = 0,
    no_seat_order: Sequence[str] = (),
) -> AgreementReport:
    """The figures for the judges' ``ratings`` of ``logs`` (the tag's episodes that did not fail)."""
    logs = [log for log in logs if log.status != "failed"]
    dims = shared_dimensions(r for by_episode in ratings.values() for r in by_episode.values())
    counts = [
        _count(judge, seats, logs, by_episode)
        for judge in judges
        for (j, seats), by_episode in ratings.items()
        if j == judge
    ]
    pairs = [
        row
        for i, a in enumerate(judges)
        for b in judges[i + 1 :]
        for row in _pair_rows(logs, a, b, ratings, dims, resamples, seed)
    ]
    bias = [
        row
        for judge in judges
        if (judge, "reversed") in ratings
        for row in _seat_bias_rows(logs, judge, ratings, dims, resamples, seed)
    ]
    return AgreementReport(
        tag=tag,
        episodes=len(logs),
        judges=list(judges),
        dimensions=dims,
        resamples=resamples,
        counts=counts,
        pairs=pairs,
        seat_bias=bias,
        no_seat_order=list(no_seat_order),
    )


# -- what a protocol card carries -----------------------------------------------------------------------------


class AgreementFigure(BaseModel):
    """How the judge a protocol card pins (``judge`` and ``judge_sha256``) agreed with another judge, and its seat
    bias, on one dimension (goal where rated, else overall), as last measured on ``tag``."""

    judge: str
    judge_sha256: str
    other: str | None = None  # the other judge's name; None: seat bias only
    tag: str
    dimension: str
    episodes: int
    spearman: Estimate | None = None
    alpha: Estimate | None = None
    mean_difference: Estimate | None = None  # this judge minus the other
    seat_bias: Estimate | None = None
    measured_at: str = Field(default_factory=lambda: datetime.now(timezone.utc).isoformat(timespec="seconds"))

    @property
    def key(self) -> str:
        return f"{self.judge}|{self.judge_sha256}|{self.other or '-'}|{self.tag}"

    def line(self) -> str:
        """The figure as the card's one line."""
        parts = []
        if self.other is not None and self.spearman and self.alpha and self.mean_difference:
            parts += [
                f"vs {self.other}: rho {self.spearman.text()}",
                f"alpha {self.alpha.text()}",
                f"mean difference {self.mean_difference.text(signed=True)}",
            ]
        if self.seat_bias is not None:
            parts.append(f"seat bias {self.seat_bias.text(signed=True)}")
        return f"{' · '.join(parts)} ({self.dimension}, {self.episodes} episodes of {self.tag})"


def card_figures(report: AgreementReport, identities: dict[str, tuple[str, str]]) -> list[AgreementFigure]:
    """One figure per judge and other judge (a judge alone with its seat bias: one figure), on goal where every
    judge rated it, else overall. ``identities``: each judge label's evaluator name and ``judge_sha256``."""
    dim = "goal" if "goal" in report.dimensions else OVERALL
    if dim not in report.dimensions:
        return []
    bias = {row.judge: row for row in report.seat_bias if row.dimension == dim}
    figures = []
    for judge in report.judges:
        name, digest = identities[judge]
        seat_bias = bias[judge].bias if judge in bias and bias[judge].episodes else None
        rows = [r for r in report.pairs if r.dimension == dim and judge in (r.judge_a, r.judge_b)]
        for row in rows:
            other = row.judge_b if row.judge_a == judge else row.judge_a
            diff = row.mean_difference if row.judge_a == judge else row.mean_difference.negated()
            figures.append(
                AgreementFigure(
                    judge=name,
                    judge_sha256=digest,
                    other=identities[other][0],
                    tag=report.tag,
                    dimension=dim,
                    episodes=row.episodes,
                    spearman=row.spearman,
                    alpha=row.alpha,
                    mean_difference=diff,
                    seat_bias=seat_bias,
                )
            )
        if not rows and seat_bias is not None:
            episodes = bias[judge].episodes
            figures.append(
                AgreementFigure(
                    judge=name,
                    judge_sha256=digest,
                    tag=report.tag,
                    dimension=dim,
                    episodes=episodes,
                    seat_bias=seat_bias,
                )
            )
    return figures


def save_figures(store: EpisodeStore, figures: Iterable[AgreementFigure]) -> None:
    """Keep ``figures`` in the store, each replacing the one measured before for the same judges and tag."""
    for figure in figures:
        store.queue_put(FIGURES, figure.key, figure.model_dump_json())


def stored_figures(store: EpisodeStore) -> list[AgreementFigure]:
    """Every figure kept in the store, newest first; a record that does not parse is skipped."""
    out = []
    for body in store.queue_items(FIGURES).values():
        try:
            out.append(AgreementFigure.model_validate_json(body))
        except ValueError:
            continue
    return sorted(out, key=lambda f: f.measured_at, reverse=True)


# -- the terminal ---------------------------------------------------------------------------------------------


def print_agreement(report: AgreementReport, console) -> None:
    """The counts, one table per pair of judges, and the seat-bias table."""
    from rich.table import Table

    title = f"tag {report.tag}: {report.episodes} episodes"
    counts = Table("judge", "seats", "rated", "unrated", "why unrated", title=title)
    for c in report.counts:
        counts.add_row(c.judge, c.seats, str(c.rated), str(c.unrated), "; ".join(c.errors) or "-")
    console.print(counts)
    note = f"95% bootstrap intervals over episodes ({report.resamples} resamples); unrated seats excluded"
    pairs: dict[tuple[str, str], list[PairRow]] = {}
    for row in report.pairs:
        pairs.setdefault((row.judge_a, row.judge_b), []).append(row)
    for (a, b), rows in pairs.items():
        table = Table("dimension", "n", "Spearman rho", "Krippendorff alpha", f"mean {a} - {b}", title=f"{a} vs {b}")
        for r in rows:
            table.add_row(
                r.dimension, str(r.units), r.spearman.text(), r.alpha.text(), r.mean_difference.text(signed=True)
            )
        table.caption = note
        console.print(table)
    judges = list(dict.fromkeys(r.judge for r in report.seat_bias))
    if judges:
        table = Table("dimension", *(f"{j} (n)" for j in judges), title="seat bias: points for being read first")
        by = {(r.dimension, r.judge): r for r in report.seat_bias}
        for dim in report.dimensions:
            table.add_row(dim, *(f"{by[(dim, j)].bias.text(signed=True)} ({by[(dim, j)].episodes})" for j in judges))
        table.caption = note
        console.print(table)
    for judge in report.no_seat_order:
        note = f"{judge}: no seat order in its prompt (it reads seats by name); seat bias not measured"
        console.print(note, soft_wrap=True, highlight=False)
