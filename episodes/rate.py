"""Rating stored episodes after the fact (``episodes evaluate``): the rate -> store tail of ``run_episode``."""

from __future__ import annotations

import asyncio

from sotopia_env.backends.remote import call_limit
from sotopia_env.episodes.runner import run_episode
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.episodes.store_writer import DEFAULT_RETRY_SECONDS, StoreWriter
from sotopia_env.evaluators import Evaluator
from sotopia_env.limits import DEFAULT_CONCURRENCY


async def rate_stored(
    store: EpisodeStore,
    evaluator: Evaluator,
    tag: str | None = None,
    only_unrated: bool = True,
    concurrency: int = DEFAULT_CONCURRENCY,
    retry_seconds: float = DEFAULT_RETRY_SECONDS,
) -> dict[str, int]:
    """Rate (or re-rate) stored episodes in place. Failed episodes, which have no transcript to rate, are skipped.

    Raises ``EpisodesSpilled`` at the end if the store went down and stayed down (the ratings are in the spill file).
    """
    logs = [log for log in store.iter(tag) if log.status != "failed" and (not only_unrated or log.status == "unrated")]
    writer = StoreWriter(store, f"rate-{tag or 'all'}", retry_seconds)
    slot = asyncio.Semaphore(max(1, concurrency))
    counts = {"rated": 0, "unrated": 0, "failed": 0}  # failed: the judge's service failed, the episode unchanged

    from sotopia_env.episodes.progress import track

    with call_limit(concurrency):  # one judge call per rating in flight
        rated = await track([run_episode(log, evaluator, writer, slot=slot) for log in logs], description="rating")
    for log in rated:
        counts[log.status] += 1
    writer.finish()
    return counts
