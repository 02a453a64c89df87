"""The viewer's FastAPI app: server-rendered HTML pages and JSON endpoints, read-only.

Pages: ``/`` (episode list), ``/episodes/{id}``, ``/report``, ``/report.png``.
JSON: ``/api/episodes``, ``/api/episodes/{id}``, ``/api/report``, ``/api/facets``.
Only GET (and HEAD) are served; any other method gets 405. Pages load no
script and nothing from elsewhere (the stylesheet is inline), and the
Content-Security-Policy forbids both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from episodes.log import STATUSES, EpisodeLog
from episodes.store import EpisodeStore, StoreError, open_store
from episodes.viewer import episode as ep
from episodes.viewer.index import SEAT_AGGREGATES, SummaryIndex
from episodes.viewer.listing import MAX_LIMIT, ListQuery, Order, list_episodes
from episodes.viewer.reports import ReportCache
from episodes.viewer.templates import environment
from sotopia_env.evaluation import SOTOPIA_DIMENSIONS
from sotopia_env.observation import relationship_of

READ_METHODS = ("GET", "HEAD")
SPLITS = ("train", "dev", "test")
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
KINDS = {"speak": "said", "nonverbal": "non-verbal", "action": "action", "leave": "left", "none": "nothing"}


def create_app(store: EpisodeStore | str | None = None, *, warm: bool = False, max_age: float = 120.0) -> FastAPI:
    """The viewer for ``store`` (a store, a store URL, or None for the default store).

    ``warm`` starts building the summary index in the background right away;
    ``max_age`` is how old (seconds) the index may get before it is rebuilt.
    """
    st = store if store is not None and not isinstance(store, str) else open_store(store)
    index = SummaryIndex(st, max_age=max_age)
    reports = ReportCache(index)
    templates = environment()
    app = FastAPI(title="sotopia-env viewer", docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    app.state.store, app.state.index = st, index

    def html(name: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        body = templates.get_template(name).render(store_url=st.url, **context)
        return HTMLResponse(body, status_code=status_code)

    def facets() -> dict[str, list[str]]:
        state = index.peek()  # never wait for the index just to fill the filter choices
        if state is not None:
            return state.facets
        return {"tags": st.tags(), "models": [], "scenarios": [], "splits": list(SPLITS), "dimensions": []}

    def load(episode_id: str) -> EpisodeLog:
        try:
            return st.get(episode_id)
        except KeyError:
            raise HTTPException(404, f"no episode {episode_id!r} in {st.url}") from None

    @app.middleware("http")
    async def read_only(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        if request.method not in READ_METHODS:
            return PlainTextResponse("read-only viewer: only GET", 405, headers={"Allow": ", ".join(READ_METHODS)})
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "no-referrer"
        return response

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        return error(request, exc.status_code, str(exc.detail))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:])
        return error(request, 422, f"{where}: {first.get('msg', 'invalid request')}")

    @app.exception_handler(StoreError)
    async def store_down(request: Request, exc: StoreError) -> Response:
        return error(request, 503, str(exc))

    def error(request: Request, status: int, message: str) -> Response:
        if request.url.path.startswith("/api/") or request.url.path.endswith(".png"):
            return JSONResponse({"detail": message}, status_code=status)
        titles = {404: "Not found", 405: "Method not allowed", 422: "Bad request", 503: "Store unavailable"}
        return html("error.html", status, status=status, title=titles.get(status, "Error"), message=message)

    @app.get("/", response_class=HTMLResponse, summary="Episode list")
    def list_page(q: ListQuery = Depends(list_query)) -> HTMLResponse:
        page = list_episodes(st, index, q)
        found = facets()
        dims = [d.name for d in SOTOPIA_DIMENSIONS] + [d for d in found["dimensions"] if d not in _SOTOPIA]
        columns = [d for d in ("goal", "overall") if q.sort != d] + ([q.sort] if q.sort != "created" else [])
        seats = [(a, f"{a} of seats") for a in SEAT_AGGREGATES] + [("1", "seat 1"), ("2", "seat 2")]
        return html(
            "list.html", q=q, page=page, facets=found, splits=sorted({*SPLITS, *found["splits"]}),
            statuses=STATUSES, sorts=["created", "overall", *dims], seats=seats, max_limit=MAX_LIMIT,
            score_columns=columns[:3],
        )

    @app.get("/api/episodes", summary="Episode list (JSON)")
    def list_json(q: ListQuery = Depends(list_query)) -> dict[str, Any]:
        return list_episodes(st, index, q).to_dict()

    @app.get("/episodes/{episode_id:path}", response_class=HTMLResponse, summary="One episode")
    def episode_page(episode_id: str) -> HTMLResponse:
        log = load(episode_id)
        return html(
            "episode.html", log=log, seats=ep.seats(log), lines=ep.transcript(log), rows=ep.score_rows(log),
            overall=ep.overall(log), relationship=relationship_of(log.setup).name, kinds=KINDS,
        )

    @app.get("/api/episodes/{episode_id:path}", summary="One episode (JSON)")
    def episode_json(episode_id: str) -> dict[str, Any]:
        return ep.episode_json(load(episode_id))

    @app.get("/report", response_class=HTMLResponse, summary="Report: model x dimension, 95% intervals")
    def report_page(tag: str | None = None, by_seat: bool = False) -> HTMLResponse:
        tag = tag or None
        params = {k: v for k, v in (("tag", tag), ("by_seat", "true" if by_seat else None)) if v}
        return html(
            "report.html", report=reports.report(tag, by_seat), tag=tag, by_seat=by_seat, tags=facets()["tags"],
            params=params,
        )

    @app.get("/api/report", summary="Report (JSON)")
    def report_json(tag: str | None = None, by_seat: bool = False) -> dict[str, Any]:
        return reports.report(tag or None, by_seat).to_dict()

    @app.get("/report.png", summary="Report chart (PNG)", response_class=Response)
    def report_png(tag: str | None = None, by_seat: bool = False) -> Response:
        png = reports.chart(tag or None, by_seat)
        if png is None:
            raise HTTPException(404, "no rated episodes to plot" + (f" with tag {tag!r}" if tag else ""))
        return Response(png, media_type="image/png", headers={"Cache-Control": "no-cache"})

    @app.get("/api/facets", summary="Filter values: tags, models, scenarios, splits, dimensions")
    def facets_json() -> dict[str, list[str]]:
        return index.get().facets

    if warm:
        reports.warm()
    return app


_SOTOPIA = {d.name for d in SOTOPIA_DIMENSIONS}


def list_query(
    tag: str | None = Query(None, description="Only this tag."),
    model: str | None = Query(None, description="Only episodes where this model played any seat."),
    scenario: str | None = Query(None, description="Only this scenario id."),
    split: str | None = Query(None, description="Only scenarios of this split (train, dev, test)."),
    status: str | None = Query(None, description="rated, unrated or failed."),
    sort: str = Query("created", description="created, overall, or a dimension name."),
    seat: str = Query("mean", description="Whose score sorts: 1, 2... or mean, max, min over seats."),
    order: Order = Query("desc", description="desc (newest/best first) or asc."),
    offset: int = Query(0, ge=0),
    limit: int = Query(50, ge=1, le=MAX_LIMIT),
) -> ListQuery:
    """The list's query parameters (a FastAPI dependency shared by the page and the JSON)."""
    q = ListQuery(tag or None, model or None, scenario or None, split or None, status or None,
                  sort or "created", seat or "mean", order, offset, limit)
    try:
        q.check()
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    return q

