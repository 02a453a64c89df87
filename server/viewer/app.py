"""The viewer's FastAPI app: server-rendered HTML and JSON over an episode store, read-only.

Only GET is served; any other method (HEAD included) gets 405. Only loopback's ``Host`` names and
``allowed_hosts`` are answered, and a foreign ``Origin`` is refused (``security.HostCheck``, as for the server).
With a ``token`` (``view`` off loopback makes one), every request needs it (``security.TokenCheck``, as for the
server). Pages load no
script and nothing from elsewhere (the stylesheet is inline), and the
Content-Security-Policy forbids both, so the viewer works offline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from sotopia_env.episodes.store import EpisodeStore, StoreError, open_store
from sotopia_env.server.openapi import allowed_methods, describe
from sotopia_env.server.security import LOOPBACK_HOSTS, HostCheck, TokenCheck
from sotopia_env.server.viewer.context import Viewer
from sotopia_env.server.viewer.routes import router

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; "
    "base-uri 'none'; frame-ancestors 'none'"
)
TITLES = {404: "Not found", 405: "Method not allowed", 422: "Bad request", 503: "Store unavailable"}


def create_app(
    store: EpisodeStore | str | None = None,
    *,
    warm: bool = False,
    max_age: float = 120.0,
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
    token: str | None = None,
) -> FastAPI:
    """The viewer over ``store`` (a store, a store URL, or None for the default store).

    ``warm`` builds the summary index (and the all-tags report) in the background right away; ``max_age`` is how
    many seconds the index may age before it is rebuilt in the background. ``allowed_hosts``: the ``Host`` names
    answered (``security.served_hosts``). ``token``: the token every request needs (None: none).
    """
    st = store if store is not None and not isinstance(store, str) else open_store(store)
    v = Viewer.over(st, max_age=max_age)
    # no /docs or /redoc: Swagger UI and ReDoc load their scripts from a CDN
    app = FastAPI(title="sotopia-env viewer", docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    app.state.viewer, app.state.store, app.state.index = v, st, v.index
    app.include_router(router)
    app.middleware("http")(read_only)
    app.add_middleware(TokenCheck, token=token)
    app.add_middleware(HostCheck, hosts=allowed_hosts)  # added last: it runs first
    add_error_pages(app, v)
    describe(app, token=token is not None)
    if warm:
        v.reports.warm()
    return app


async def read_only(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    """405 for anything but GET; security headers on every answer."""
    if request.method != "GET":
        return PlainTextResponse("read-only viewer: only GET", 405, headers={"Allow": "GET"})
    response = await call_next(request)
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    return response


def add_error_pages(app: FastAPI, v: Viewer) -> None:
    """Errors as JSON ``{"detail": ...}`` under /api/ (and for the PNG), as an HTML page elsewhere."""

    def answer(request: Request, status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
        if request.url.path.startswith("/api/") or request.url.path.endswith(".png"):
            return JSONResponse({"detail": message}, status_code=status, headers=headers)
        page = v.html("error.html", status, status=status, title=TITLES.get(status, "Error"), message=message)
        page.headers.update(headers or {})
        return page

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        headers = dict(exc.headers or {})
        if exc.status_code == 405:  # Starlette's Allow names one route's methods; the document names the path's
            headers["Allow"] = allowed_methods(request.app, request.url.path) or headers.get("Allow", "")
        return answer(request, exc.status_code, str(exc.detail), headers)

    async def bad_request(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:])
        message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")  # a validator's own line
        return answer(request, 422, f"{where}: {message}" if where else message)

    async def store_down(request: Request, exc: Exception) -> Response:
        return answer(request, 503, str(exc))

    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, bad_request)
    app.add_exception_handler(StoreError, store_down)
