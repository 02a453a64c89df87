"""Rating stored episodes after the fact (``episodes evaluate --unrated``)."""

from __future__ import annotations

import asyncio

from episodes.log import UsageRecord
from episodes.store import EpisodeStore
from sotopia_env.evaluation import EpisodeContext, Evaluator, aevaluate_safely


async def rate_stored(
    store: EpisodeStore, evaluator: Evaluator, tag: str | None = None, only_unrated: bool = True, concurrency: int = 8
) -> dict[str, int]:
    """Rate (or re-rate) stored episodes in place. Failed episodes, which have no transcript to rate, are skipped."""
    logs = [log for log in store.iter(tag) if log.status != "failed" and (not only_unrated or log.status == "unrated")]
    semaphore = asyncio.Semaphore(max(1, concurrency))
    counts = {"rated": 0, "unrated": 0}

    async def one(log) -> None:
        async with semaphore:
            context = EpisodeContext(setup=log.setup, turns=log.turns, termination_reason=log.termination_reason or "")
            rating = await aevaluate_safely(evaluator, context)
            log.rating = rating
            log.status = "rated" if rating.rated else "unrated"
            if rating.usage:
                log.usage["evaluator"] = UsageRecord(**rating.usage)
            await asyncio.to_thread(store.put, log)
            counts[log.status] += 1

    from episodes.progress import track

    await track([one(log) for log in logs], description="rating", enabled=True)
    return counts
