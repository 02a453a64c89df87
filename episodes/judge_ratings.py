"""Several judges re-rate one tag's stored episodes, each judge's ratings kept apart (``episodes evaluate --judge``).

The episodes themselves are never changed. Each rating is a ``JudgeRating`` record: which judge (its ``--judge``
label), which seat order (``as-played``, or ``reversed`` for the seat-bias check), which episode, the rating (or
unrated with its error) and the sha256 of the judge's prompt (``episodes.protocol.judge_sha256``). Records live in
the store's keyed records (``queue_put``, SQLite and Redis alike) under ``judge-ratings:<tag>``, apart from the
episodes, so a report, the leaderboard or a training filter never mistakes them for the episodes' own ratings.

Resumable, like the runner: a rerun reuses every valid rating whose judge prompt is unchanged, and rates only what
is missing, unrated, or was rated under another prompt (``redo=True`` re-rates everything). Each rating goes
through ``episodes.runner.rate``, the rate step every episode takes, on a copy of the episode kept in memory.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ValidationError

from sotopia_env.backends.base import Usage
from sotopia_env.backends.remote import call_limit
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.protocol import judge_sha256
from sotopia_env.episodes.runner import rate
from sotopia_env.episodes.store import EpisodeStore, StoreError
from sotopia_env.evaluators import EpisodeRating, Evaluator
from sotopia_env.limits import DEFAULT_CONCURRENCY

Seats = Literal["as-played", "reversed"]
RECORDS = "judge-ratings"


class JudgeRating(BaseModel):
    """One judge's rating of one stored episode, in one seat order."""

    episode_id: str
    judge: str  # the label it was given (its --judge spec)
    seats: Seats
    evaluator: str  # the evaluator's name (llm:MODEL, rule-based, ...)
    judge_sha256: str
    rating: EpisodeRating

    @property
    def key(self) -> str:
        return record_key(self.judge, self.seats, self.episode_id)


def record_key(judge: str, seats: Seats, episode_id: str) -> str:
    return f"{judge}|{seats}|{episode_id}"


def records_name(tag: str) -> str:
    """The store's keyed records that hold the judges' ratings of ``tag``."""
    return f"{RECORDS}:{tag}"


@dataclass(frozen=True)
class JudgeRun:
    """A judge in one seat order: what rates, and under which label its ratings are kept."""

    judge: str
    seats: Seats
    evaluator: Evaluator


def seats_reversed(evaluator: Evaluator) -> Evaluator | None:
    """The same judge presenting the seats last to first; None for a judge whose prompt has no seat order (a rule
    judge reads every seat by name)."""
    if not hasattr(evaluator, "reverse_seats"):
        return None
    flipped = copy.copy(evaluator)  # the same backend: one model, one batch
    flipped.reverse_seats = True  # type: ignore[attr-defined]
    if hasattr(flipped, "usage"):
        flipped.usage = Usage()  # type: ignore[attr-defined]
    return flipped


def judge_runs(judges: dict[str, Evaluator], swap_seats: bool) -> tuple[list[JudgeRun], list[str]]:
    """Every judge as played, and (``swap_seats``) reversed where it has a seat order; also the judges that have
    none (their seat bias is not measured)."""
    runs, no_order = [], []
    for label, evaluator in judges.items():
        runs.append(JudgeRun(label, "as-played", evaluator))
        if swap_seats:
            flipped = seats_reversed(evaluator)
            if flipped is None:
                no_order.append(label)
            else:
                runs.append(JudgeRun(label, "reversed", flipped))
    return runs, no_order


def stored_ratings(store: EpisodeStore, tag: str) -> dict[str, JudgeRating]:
    """The judges' ratings of ``tag`` kept in ``store``, by record key; a record that does not parse is skipped
    (it is rated again)."""
    out = {}
    for key, body in store.queue_items(records_name(tag)).items():
        try:
            out[key] = JudgeRating.model_validate_json(body)
        except ValidationError:
            continue
    return out


@dataclass
class RatingOutcome:
    """What ``rate_with_judges`` did, and every rating of the tag's episodes by the judges it was given."""

    ratings: dict[tuple[str, Seats], dict[str, EpisodeRating]]  # (judge, seats) -> episode id -> rating
    reused: int = 0
    rated: int = 0
    unrated: int = 0
    seconds: float = 0.0
    unsaved: list[JudgeRating] = field(default_factory=list)


async def rate_with_judges(
    store: EpisodeStore,
    tag: str,
    logs: Sequence[EpisodeLog],
    runs: Sequence[JudgeRun],
    redo: bool = False,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: bool = True,
) -> RatingOutcome:
    """Rate ``logs`` (episodes of ``tag``, failed ones excluded) with every run; what is done already is reused.

    Raises ``StoreError`` at the end if some ratings could not be stored (they are in the outcome; a rerun rates
    them again).
    """
    started = time.perf_counter()
    logs = [log for log in logs if log.status != "failed"]  # no transcript to rate
    name = records_name(tag)
    kept = stored_ratings(store, tag)
    outcome = RatingOutcome({(run.judge, run.seats): {} for run in runs})
    todo = []
    for run in runs:
        digest = judge_sha256(run.evaluator)
        for log in logs:
            record = kept.get(record_key(run.judge, run.seats, log.id))
            if not redo and record is not None and record.rating.rated and record.judge_sha256 == digest:
                outcome.ratings[(run.judge, run.seats)][log.id] = record.rating
                outcome.reused += 1
            else:
                todo.append((run, digest, log))

    slot = asyncio.Semaphore(max(1, concurrency))

    async def rate_one(run: JudgeRun, digest: str, log: EpisodeLog) -> JudgeRating:
        async with slot:
            rated = await rate(log.model_copy(update={"usage": dict(log.usage)}), run.evaluator)
        assert rated.rating is not None  # rate() rates every episode that did not fail
        record = JudgeRating(
            episode_id=log.id,
            judge=run.judge,
            seats=run.seats,
            evaluator=run.evaluator.name,
            judge_sha256=digest,
            rating=rated.rating,
        )
        try:
            await asyncio.to_thread(store.queue_put, name, record.key, record.model_dump_json())
        except StoreError:
            outcome.unsaved.append(record)
        return record

    from sotopia_env.episodes.progress import track

    with call_limit(concurrency):
        done = await track([rate_one(*item) for item in todo], description="rating", enabled=progress)
    for record in done:
        outcome.ratings[(record.judge, record.seats)][record.episode_id] = record.rating
        outcome.rated += record.rating.rated
        outcome.unrated += not record.rating.rated
    _store_again(store, name, outcome.unsaved)
    outcome.seconds = time.perf_counter() - started
    return outcome


def _store_again(store: EpisodeStore, name: str, unsaved: list[JudgeRating]) -> None:
    """One more try for the ratings whose write failed; StoreError with how many are still not stored."""
    error = None
    for record in list(unsaved):
        try:
            store.queue_put(name, record.key, record.model_dump_json())
            unsaved.remove(record)
        except StoreError as exc:
            error = exc
    if unsaved:
        raise StoreError(
            f"{len(unsaved)} judge ratings could not be stored in {store.url} ({error}); "
            "run the command again to rate them again"
        )
