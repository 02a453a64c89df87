"""What every request handler needs: the store, the summary index, the report cache, the templates."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import HTTPException, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment

from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.server.viewer.index import SummaryIndex
from sotopia_env.server.viewer.reports import ReportCache
from sotopia_env.server.viewer.templates import environment

SPLITS = ("train", "dev", "test")


@dataclass
class Viewer:
    store: EpisodeStore
    index: SummaryIndex
    reports: ReportCache
    templates: Environment = field(default_factory=environment)

    @classmethod
    def over(cls, store: EpisodeStore, max_age: float = 120.0) -> Viewer:
        index = SummaryIndex(store, max_age=max_age)
        return cls(store, index, ReportCache(index))

    def html(self, name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        body = self.templates.get_template(name).render(store_url=self.store.url, **context)
        return HTMLResponse(body, status_code=status_code)

    def facets(self) -> dict[str, list[str]]:
        """Filter choices; never waits for the index (before it exists, only the tags are known)."""
        state = self.index.peek()
        if state is not None:
            return state.facets
        return {"tags": self.store.tags(), "models": [], "scenarios": [], "splits": list(SPLITS), "dimensions": []}

    def load(self, episode_id: str) -> EpisodeLog:
        try:
            return self.store.get(episode_id)
        except KeyError:
            raise HTTPException(404, f"no episode {episode_id!r} in {self.store.url}") from None


def viewer(request: Request) -> Viewer:
    """The FastAPI dependency that hands a route the app's ``Viewer``."""
    return request.app.state.viewer
