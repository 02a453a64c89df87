"""An in-memory index of lightweight episode summaries, for filtering and sorting many episodes.

The store can filter by tag, model, scenario and status, but not by split, and
it cannot sort by score. Parsing every stored episode takes seconds for ten
thousand of them, so the index parses each episode once and keeps only what the
list page and the report need (ids, scenario, split, models, status, scores).

Freshness: each use compares the store's per-status counts with the index's own.
When only new episodes arrived (a batch still running), just the new tail is
loaded; any other difference rebuilds the index. An index older than
``max_age`` seconds is rebuilt in the background (the old one is served
meanwhile), which catches episodes replaced in place with the same status
(e.g. re-rated).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from sotopia_env.episodes.log import STATUSES, EpisodeLog
from sotopia_env.episodes.store import EpisodeStore, StoreError

SEAT_AGGREGATES = ("mean", "max", "min")


@dataclass(frozen=True)
class Summary:
    """What the list page shows of one episode. ``scores`` holds each seat's ``{dimension: score}`` when rated."""

    id: str
    tag: str
    created_at: str
    scenario: str
    codename: str
    split: str
    agents: tuple[str, ...]
    models: tuple[str, ...]
    agent_classes: tuple[str, ...]
    status: str
    termination_reason: str | None
    turns: int
    error: str | None
    scores: tuple[dict[str, int], ...] | None

    @classmethod
    def of(cls, log: EpisodeLog) -> Summary:
        scores = None
        if log.rating is not None and log.rating.ratings is not None:
            ratings = log.rating.ratings
            scores = tuple(
                {d: s.score for d, s in ratings[a.name].scores.items()} if a.name in ratings else {} for a in log.agents
            )
        error = log.error or (log.rating.error if log.rating is not None else None)
        return cls(
            id=log.id,
            tag=log.tag,
            created_at=log.created_at,
            scenario=log.scenario_id,
            codename=log.setup.scenario.codename,
            split=log.setup.scenario.split,
            agents=tuple(a.name for a in log.agents),
            models=tuple(a.model for a in log.agents),
            agent_classes=tuple(a.agent_class for a in log.agents),
            status=log.status,
            termination_reason=log.termination_reason,
            turns=len(log.turns),
            error=error,
            scores=scores,
        )

    def seat_score(self, seat: int, dimension: str) -> float | None:
        """Seat ``seat``'s (0-based) score on ``dimension`` or ``overall``; None when unrated or absent."""
        if self.scores is None or seat >= len(self.scores):
            return None
        scores = self.scores[seat]
        if dimension == "overall":
            return sum(scores.values()) / len(scores) if scores else None
        value = scores.get(dimension)
        return None if value is None else float(value)

    def score(self, dimension: str, seat: str = "mean") -> float | None:
        """``seat`` is a 1-based seat number (``"1"``, ``"2"``...) or ``mean``, ``max`` or ``min`` over seats."""
        if seat.isdigit():
            return self.seat_score(int(seat) - 1, dimension)
        values = [v for i in range(len(self.agents)) if (v := self.seat_score(i, dimension)) is not None]
        if not values:
            return None
        if seat == "max":
            return max(values)
        if seat == "min":
            return min(values)
        return sum(values) / len(values)

    def to_dict(self) -> dict[str, Any]:
        scores = None
        if self.scores is not None:
            scores = {
                name: {**self.scores[i], "overall": self.seat_score(i, "overall")} for i, name in enumerate(self.agents)
            }
        return {
            "id": self.id,
            "tag": self.tag,
            "created_at": self.created_at,
            "scenario": self.scenario,
            "codename": self.codename,
            "split": self.split,
            "agents": [
                {"name": n, "model": m, "agent_class": c}
                for n, m, c in zip(self.agents, self.models, self.agent_classes, strict=True)
            ],
            "status": self.status,
            "termination_reason": self.termination_reason,
            "turns": self.turns,
            "error": self.error,
            "scores": scores,
        }


def status_counts(statuses: Iterable[str]) -> tuple[int, ...]:
    counts = Counter(statuses)
    return tuple(counts[s] for s in STATUSES)


@dataclass
class IndexState:
    """One consistent snapshot: summaries in store order (oldest first)."""

    items: list[Summary]
    version: int
    built_at: float = field(default_factory=time.monotonic)

    @cached_property
    def fingerprint(self) -> tuple[int, ...]:
        return status_counts(s.status for s in self.items)

    @cached_property
    def ids(self) -> set[str]:
        return {s.id for s in self.items}

    @cached_property
    def facets(self) -> dict[str, list[str]]:
        """Distinct values to offer as filters, and every score dimension seen."""
        dims: dict[str, None] = {}
        for s in self.items:
            for scores in s.scores or ():
                dims.update(dict.fromkeys(scores))
        return {
            "tags": sorted({s.tag for s in self.items}),
            "models": sorted({m for s in self.items for m in s.models}),
            "scenarios": sorted({s.scenario for s in self.items}),
            "splits": sorted({s.split for s in self.items}),
            "dimensions": list(dims),
        }


class SummaryIndex:
    """Summaries of every episode in ``store``, kept fresh as described in the module docstring."""

    def __init__(self, store: EpisodeStore, max_age: float = 120.0) -> None:
        self.store = store
        self.max_age = max_age
        self._state: IndexState | None = None
        self._build_lock = threading.Lock()  # one update or rebuild at a time

    def store_fingerprint(self) -> tuple[int, ...]:
        return tuple(self.store.count(status=s) for s in STATUSES)

    def peek(self) -> IndexState | None:
        """The current snapshot without touching the store (None before the first build)."""
        return self._state

    def get(self) -> IndexState:
        """A snapshot that matches the store's counts; blocks while it is being (re)built."""
        fingerprint = self.store_fingerprint()
        state = self._state
        if state is None or state.fingerprint != fingerprint:
            return self._update(fingerprint)
        if time.monotonic() - state.built_at > self.max_age and not self._build_lock.locked():
            threading.Thread(target=self._rebuild, name="viewer-index", daemon=True).start()
        return state

    def _update(self, fingerprint: tuple[int, ...]) -> IndexState:
        with self._build_lock:
            state = self._state
            if state is not None and state.fingerprint == fingerprint:
                return state  # another request just did it
            new = self._append_tail(state, fingerprint) if state is not None else None
            self._state = new or self._build()
            return self._state

    def _append_tail(self, state: IndexState, fingerprint: tuple[int, ...]) -> IndexState | None:
        """The snapshot plus episodes stored after it, if that alone explains the new counts; else None."""
        if sum(fingerprint) <= len(state.items):
            return None
        tail = [Summary.of(log) for log in self.store.query(offset=len(state.items))]
        if any(s.id in state.ids for s in tail):
            return None  # something was inserted before the end: order changed
        items = state.items + tail
        if status_counts(s.status for s in items) != fingerprint:
            return None
        return IndexState(items, state.version + 1, built_at=state.built_at)

    def _build(self) -> IndexState:
        version = self._state.version + 1 if self._state is not None else 1
        return IndexState([Summary.of(log) for log in self.store.iter()], version)

    def _rebuild(self) -> None:
        with self._build_lock, contextlib.suppress(StoreError):  # the next request reports it
            state = self._state
            if state is None or time.monotonic() - state.built_at > self.max_age:
                self._state = self._build()
