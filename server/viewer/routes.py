"""The viewer's routes: HTML pages and the JSON endpoints for the same data (GET only)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import HTMLResponse, Response

from sotopia_env.episodes.leaderboard import leaderboard
from sotopia_env.episodes.log import STATUSES
from sotopia_env.evaluators import SOTOPIA_DIMENSIONS
from sotopia_env.observation import relationship_of
from sotopia_env.server.openapi import NOT_FOUND, error
from sotopia_env.server.viewer import episode as ep
from sotopia_env.server.viewer.context import SPLITS, Viewer, viewer
from sotopia_env.server.viewer.index import SEAT_AGGREGATES
from sotopia_env.server.viewer.listing import MAX_LIMIT, MAX_OFFSET, ListQuery, Order, list_episodes

router = APIRouter()
SOTOPIA = [d.name for d in SOTOPIA_DIMENSIONS]
KINDS = {"speak": "said", "nonverbal": "non-verbal", "action": "action", "leave": "left", "none": "nothing"}
STATUS_VALUES = ["", *STATUSES]  # empty: any (the page's form sends it)
SORT_PATTERN = r"^(|created|[a-z][a-z0-9_]*)$"  # as ListQuery.check; empty: created
SEAT_PATTERN = rf"^(|{'|'.join(SEAT_AGGREGATES)}|0*[1-9][0-9]*)$"  # empty: mean
SEAT_CHOICES = [(a, f"{a} of seats") for a in SEAT_AGGREGATES] + [("1", "seat 1"), ("2", "seat 2")]


def list_query(
    tag: str | None = Query(None, description="Only this tag."),
    model: str | None = Query(None, description="Only episodes where this model played any seat."),
    scenario: str | None = Query(None, description="Only this scenario id."),
    split: str | None = Query(None, description="Only scenarios of this split (train, dev, test)."),
    status: str | None = Query(
        None, description="rated, unrated or failed.", json_schema_extra={"enum": STATUS_VALUES}
    ),
    sort: str = Query("created", description="created, overall, or a dimension name.", pattern=SORT_PATTERN),
    seat: str = Query(
        "mean", description="Whose score sorts: 1, 2... or mean, max, min over seats.", pattern=SEAT_PATTERN
    ),
    order: Order = Query("desc", description="desc (newest/best first) or asc."),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    limit: int = Query(50, ge=1, le=MAX_LIMIT),
) -> ListQuery:
    """The list's query parameters, shared by the page and the JSON; empty values mean 'any'."""
    q = ListQuery(
        tag or None,
        model or None,
        scenario or None,
        split or None,
        status or None,
        sort or "created",
        seat or "mean",
        order,
        offset,
        limit,
    )
    try:
        q.check()
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    return q


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def list_page(q: ListQuery = Depends(list_query), v: Viewer = Depends(viewer)) -> HTMLResponse:
    page = list_episodes(v.store, v.index, q)
    facets = v.facets()
    dims = SOTOPIA + [d for d in facets["dimensions"] if d not in SOTOPIA]
    columns = [d for d in ("goal", "overall") if d != q.sort] + ([q.sort] if q.sort != "created" else [])
    return v.html(
        "list.html",
        q=q,
        page=page,
        facets=facets,
        splits=sorted({*SPLITS, *facets["splits"]}),
        statuses=STATUSES,
        sorts=["created", "overall", *dims],
        seats=SEAT_CHOICES,
        max_limit=MAX_LIMIT,
        score_columns=columns,
    )


@router.get("/api/episodes", summary="Episode list (JSON)")
def list_json(q: ListQuery = Depends(list_query), v: Viewer = Depends(viewer)) -> dict[str, Any]:
    return list_episodes(v.store, v.index, q).to_dict()


@router.get("/episodes/{episode_id:path}", response_class=HTMLResponse, include_in_schema=False)
def episode_page(episode_id: str, v: Viewer = Depends(viewer)) -> HTMLResponse:
    log = v.load(episode_id)
    return v.html(
        "episode.html",
        log=log,
        seats=ep.seats(log),
        lines=ep.transcript(log),
        rows=ep.score_rows(log),
        overall=ep.overall(log),
        relationship=relationship_of(log.setup).name,
        kinds=KINDS,
    )


@router.get("/api/episodes/{episode_id:path}", summary="One episode (JSON)", responses=NOT_FOUND)
def episode_json(episode_id: str, v: Viewer = Depends(viewer)) -> dict[str, Any]:
    return ep.episode_json(v.load(episode_id))


@router.get("/report", response_class=HTMLResponse, include_in_schema=False)
def report_page(tag: str | None = None, by_seat: bool = False, v: Viewer = Depends(viewer)) -> HTMLResponse:
    tag = tag or None
    report = v.reports.report(tag, by_seat)
    params = {k: val for k, val in (("tag", tag), ("by_seat", "true" if by_seat else None)) if val}
    return v.html("report.html", report=report, tag=tag, by_seat=by_seat, tags=v.facets()["tags"], params=params)


@router.get("/api/report", summary="Report (JSON), as written by 'sotopia-env report --json'")
def report_json(tag: str | None = None, by_seat: bool = False, v: Viewer = Depends(viewer)) -> dict[str, Any]:
    return v.reports.report(tag or None, by_seat).to_dict()


@router.get(
    "/report.png",
    response_class=Response,
    summary="Report chart (PNG), as 'sotopia-env report --png'",
    responses={
        200: {
            "content": {"image/png": {"schema": {"type": "string", "format": "binary"}}},
            "description": "The chart.",
        },
        404: error("No rated episodes to plot (with this tag)."),
    },
)
def report_png(tag: str | None = None, by_seat: bool = False, v: Viewer = Depends(viewer)) -> Response:
    png = v.reports.chart(tag or None, by_seat)
    if png is None:
        raise HTTPException(404, "no rated episodes to plot" + (f" with tag {tag!r}" if tag else ""))
    return Response(png, media_type="image/png", headers={"Cache-Control": "no-cache"})


@router.get("/leaderboard", response_class=HTMLResponse, include_in_schema=False)
def leaderboard_page(tag: str | None = None, v: Viewer = Depends(viewer)) -> HTMLResponse:
    tag = tag or None
    boards = leaderboard(v.store, [tag] if tag else None)
    params = {"tag": tag} if tag else {}
    return v.html("leaderboard.html", boards=boards, tag=tag, tags=v.facets()["tags"], params=params)


@router.get("/api/leaderboard", summary="Leaderboard (JSON), as written by 'sotopia-env leaderboard --json'")
def leaderboard_json(tag: str | None = None, v: Viewer = Depends(viewer)) -> dict[str, Any]:
    return {"boards": [b.to_dict() for b in leaderboard(v.store, [tag] if tag else None)]}


@router.get("/api/facets", summary="Filter values: tags, models, scenarios, splits, dimensions")
def facets_json(v: Viewer = Depends(viewer)) -> dict[str, list[str]]:
    return v.index.get().facets
