"""The episode list: filters, sorting and pagination.

Sorting: ``sort`` is ``created`` (the default), ``overall`` or a dimension name;
``seat`` picks whose score counts: ``1``, ``2``... (that seat), or ``mean``
(the default), ``max`` or ``min`` over all seats. ``order`` is ``desc`` (the
default: newest or best first) or ``asc``. Episodes without that score
(unrated, failed, or a dimension they were not rated on) always come last,
oldest first among themselves; ties keep creation order.

Sorted by creation and not filtered by split, a page comes straight from the
store (``count`` + ``query``), so it is fast even before the index is built;
any other list uses the in-memory ``SummaryIndex``.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from sotopia_env.episodes.log import STATUSES
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.server.viewer.index import SEAT_AGGREGATES, Summary, SummaryIndex

MAX_LIMIT = 500
MAX_OFFSET = 2**53 - 1  # JSON's exact integers; a store's 64-bit offset overflows long before a page's offset does
Order = Literal["asc", "desc"]
_SORT = re.compile(r"^(created|[a-z][a-z0-9_]*)$")


@dataclass(frozen=True)
class ListQuery:
    tag: str | None = None
    model: str | None = None
    scenario: str | None = None
    split: str | None = None
    status: str | None = None
    sort: str = "created"
    seat: str = "mean"
    order: Order = "desc"
    offset: int = 0
    limit: int = 50

    def check(self) -> None:
        """Raise ValueError naming the first bad parameter."""
        if self.status is not None and self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {self.status!r}")
        if not _SORT.match(self.sort):
            raise ValueError(f"sort must be 'created', 'overall' or a dimension name, not {self.sort!r}")
        if not (self.seat in SEAT_AGGREGATES or (self.seat.isdigit() and int(self.seat) >= 1)):
            raise ValueError(f"seat must be a seat number (1, 2...) or one of {', '.join(SEAT_AGGREGATES)}")
        if self.order not in ("asc", "desc"):
            raise ValueError(f"order must be 'asc' or 'desc', not {self.order!r}")
        if not 0 <= self.offset <= MAX_OFFSET or not 1 <= self.limit <= MAX_LIMIT:
            raise ValueError(f"offset must be between 0 and {MAX_OFFSET} and limit between 1 and {MAX_LIMIT}")

    @property
    def needs_index(self) -> bool:
        return self.split is not None or self.sort != "created"

    def params(self, **changes: Any) -> dict[str, str]:
        """This query (with ``changes``) as URL parameters, leaving out unset filters."""
        return {k: str(v) for k, v in asdict(replace(self, **changes)).items() if v is not None and v != ""}


@dataclass
class Page:
    query: ListQuery
    total: int
    items: list[Summary]

    @property
    def next_offset(self) -> int | None:
        following = self.query.offset + self.query.limit
        return following if following < self.total else None

    @property
    def prev_offset(self) -> int | None:
        return max(0, self.query.offset - self.query.limit) if self.query.offset > 0 else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "offset": self.query.offset,
            "limit": self.query.limit,
            "sort": self.query.sort,
            "seat": self.query.seat,
            "order": self.query.order,
            "items": [s.to_dict() for s in self.items],
        }


def list_episodes(store: EpisodeStore, index: SummaryIndex, query: ListQuery) -> Page:
    query.check()
    return page_from_index(index, query) if query.needs_index else page_from_store(store, query)


def page_from_index(index: SummaryIndex, q: ListQuery) -> Page:
    matches = [s for s in index.get().items if _matches(s, q)]
    if q.sort == "created":
        ordered = matches[::-1] if q.order == "desc" else matches
    else:
        ordered = sort_by_score(matches, q.sort, q.seat, descending=q.order == "desc")
    return Page(q, len(ordered), ordered[q.offset : q.offset + q.limit])


def sort_by_score(items: list[Summary], dimension: str, seat: str, descending: bool = True) -> list[Summary]:
    """Scored episodes by score (stable), then the unscored ones in their original order."""
    keyed = [(s.score(dimension, seat), s) for s in items]
    scored = sorted(((v, s) for v, s in keyed if v is not None), key=lambda p: p[0], reverse=descending)
    return [s for _, s in scored] + [s for v, s in keyed if v is None]


def _matches(s: Summary, q: ListQuery) -> bool:
    return (
        (q.tag is None or s.tag == q.tag)
        and (q.model is None or q.model in s.models)
        and (q.scenario is None or s.scenario == q.scenario)
        and (q.split is None or s.split == q.split)
        and (q.status is None or s.status == q.status)
    )


def page_from_store(store: EpisodeStore, q: ListQuery) -> Page:
    filters = {"tag": q.tag, "model": q.model, "scenario": q.scenario, "status": q.status}
    total = store.count(**filters)
    if q.order == "asc":
        logs = store.query(**filters, limit=q.limit, offset=q.offset)
    else:  # newest first: the same window counted from the end
        end = total - q.offset
        start = max(0, end - q.limit)
        logs = store.query(**filters, limit=max(0, end - start), offset=start)[::-1] if end > 0 else []
    return Page(q, total, [Summary.of(log) for log in logs])
