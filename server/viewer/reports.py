"""Reports for the viewer, from the summary index, cached per index version.

``summary_report`` feeds ``episodes.report.aggregate`` (the one aggregation behind
every report) from ``Summary`` objects, so a report on ten thousand episodes needs
no parsing of stored logs.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path

from sotopia_env.episodes.report import Report, SeatResult, aggregate, plot_report
from sotopia_env.episodes.store import StoreError
from sotopia_env.server.viewer.index import IndexState, Summary, SummaryIndex

_plot_lock = threading.Lock()  # matplotlib's pyplot is not thread-safe


class ReportCache:
    """``build_report`` and ``plot_report`` results, keyed by (tag, by_seat, index version)."""

    def __init__(self, index: SummaryIndex, size: int = 32) -> None:
        self.index = index
        self.size = size
        self._reports: OrderedDict[tuple[str | None, bool, int], Report] = OrderedDict()
        self._charts: OrderedDict[tuple[str | None, bool, int], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def report(self, tag: str | None, by_seat: bool = False) -> Report:
        return self._report(self.index.get(), tag, by_seat)

    def _report(self, state: IndexState, tag: str | None, by_seat: bool) -> Report:
        key = (tag, by_seat, state.version)
        with self._lock:
            if key in self._reports:
                return self._reports[key]
        report = summary_report((s for s in state.items if tag is None or s.tag == tag), tag, by_seat)
        with self._lock:
            _put(self._reports, key, report, self.size)
        return report

    def warm(self) -> None:
        """Build the index and the all-tags report in the background (also loads scipy)."""

        def run() -> None:
            with contextlib.suppress(StoreError):  # the next request reports it
                self.report(None)

        threading.Thread(target=run, name="viewer-warm", daemon=True).start()

    def chart(self, tag: str | None, by_seat: bool = False) -> bytes | None:
        """The report's PNG bar chart; None when there is nothing to plot."""
        state = self.index.get()
        report = self._report(state, tag, by_seat)
        if not report.rows or not report.dimensions:
            return None
        key = (tag, by_seat, state.version)
        with self._lock:
            if key in self._charts:
                return self._charts[key]
        png = render_png(report)
        with self._lock:
            _put(self._charts, key, png, self.size)
        return png


def summary_report(items: Iterable[Summary], tag: str | None = None, group_by_seat: bool = False) -> Report:
    """``build_report`` over summaries: the same aggregation, fed from the index instead of parsed logs."""
    results = (
        SeatResult(model, seat, s.status, None if s.scores is None or s.status == "failed" else s.scores[seat])
        for s in items
        for seat, model in enumerate(s.models)
    )
    return aggregate(results, tag, group_by_seat)


def render_png(report: Report) -> bytes:
    with _plot_lock, tempfile.TemporaryDirectory(prefix="sotopia-view-") as tmp:
        path = Path(tmp) / "report.png"
        plot_report(report, str(path))
        return path.read_bytes()


def _put(cache: OrderedDict, key: object, value: object, size: int) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > size:
        cache.popitem(last=False)
