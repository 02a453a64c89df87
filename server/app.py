"""``create_server``: the one FastAPI app behind ``sotopia-env serve``.

It holds the viewer's pages and JSON (``/``, ``/episodes/{id}``, ``/report``, ``/api/episodes``, ``/api/report``),
the library (``/api/scenarios``, ``/api/characters``, ``/api/models``), benchmarks (``/api/benchmarks``),
simulations (``/api/simulations``, a WebSocket stream each, human seats), the live and play pages, and
``/api/health``. Every route and the WebSocket pass ``security.Gate`` (Host and Origin, token, body size, CSP).
A request may reach only the model servers the operator listed (``allowed_servers``), and the model calls of all
simulations and benchmarks together share one cap (``model_calls``, ``concurrency``). At start it resumes the
simulations and benchmarks the store still has queued, under the permissions they were accepted under.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request

from sotopia_env.backends.endpoints import ApiBase
from sotopia_env.episodes.job_fields import (
    DEFAULT_CONCURRENCY,
    HTTP_EPISODES_PER_SCENARIO,
    HTTP_MAX_PER_CLIENT,
    HTTP_MAX_TURNS,
)
from sotopia_env.episodes.store import EpisodeStore, open_store
from sotopia_env.library import load_library
from sotopia_env.server import benchmarks, library_routes, pages, simulation_routes
from sotopia_env.server.allowed_servers import AllowedModelServers
from sotopia_env.server.browser_seat import DEFAULT_TURN_TIMEOUT
from sotopia_env.server.caps import HttpCaps
from sotopia_env.server.openapi import describe
from sotopia_env.server.security import DEFAULT_MAX_BODY, LOOPBACK_HOSTS, Gate
from sotopia_env.server.simulations import Simulations
from sotopia_env.server.viewer.app import add_error_pages
from sotopia_env.server.viewer.context import Viewer
from sotopia_env.server.viewer.routes import router as viewer_router


def default_library_dir() -> Path:
    """Where posted scenarios and characters are kept (and read back at the next start)."""
    from platformdirs import user_data_dir

    return Path(user_data_dir("sotopia-env")) / "library"


def create_server(
    store: EpisodeStore | str | None = None,
    *,
    token: str | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    api_base: ApiBase = None,
    allowed_api_bases: ApiBase | Sequence[str] = None,
    allowed_providers: Sequence[str] = (),
    allowed_hosts: Sequence[str] = LOOPBACK_HOSTS,
    allowed_origins: Sequence[str] = (),
    allow_code_agents: bool = False,
    library_dir: Path | None = None,
    scenarios_dir: list[Path] | None = None,
    turn_timeout_s: float = DEFAULT_TURN_TIMEOUT,
    max_per_client: int = HTTP_MAX_PER_CLIENT,
    max_body_bytes: int = DEFAULT_MAX_BODY,
    max_turns: int = HTTP_MAX_TURNS,
    max_episodes_per_scenario: int = HTTP_EPISODES_PER_SCENARIO,
) -> Any:
    """The server's ASGI app (FastAPI behind the gate); ``.app`` is the FastAPI app itself.

    ``api_base``: the default model servers; a request may name those and any under ``allowed_api_bases``
    (URL prefixes), nothing else; ``allowed_providers``: the litellm providers whose own endpoints a spec without
    an ``api_base`` may reach (none by default). ``allowed_hosts``: the ``Host`` names answered
    (``security.served_hosts``); ``allowed_origins``: origins accepted besides the server's own
    (``security.served_origins``). ``concurrency``: the model calls in flight at once, across simulations and
    benchmarks; it, ``max_turns`` and ``max_episodes_per_scenario`` are also the most a request may ask
    (``HttpCaps``). ``max_per_client``: simulations and benchmarks queued or running per client."""
    st = store if store is not None and not isinstance(store, str) else open_store(store)
    folder = library_dir or default_library_dir()
    extra = [*(scenarios_dir or []), *([folder] if folder.exists() else [])]
    sims = Simulations(
        st,
        load_library(extra),
        concurrency=concurrency,
        servers=AllowedModelServers.of(api_base, allowed_api_bases, allowed_providers),
        allow_code_agents=allow_code_agents,
        turn_timeout_s=turn_timeout_s,
        max_per_client=max_per_client,
        caps=HttpCaps(concurrency, max_turns, max_episodes_per_scenario),
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.resumed = await sims.resume() + await benchmarks.resume_benchmarks(app)
        try:
            yield
        finally:
            await benchmarks.stop_benchmarks(app)
            await sims.close()

    from sotopia_env import __version__

    app = FastAPI(
        title="sotopia-env server",
        version=__version__,
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
        lifespan=lifespan,
    )
    viewer = Viewer.over(st)
    app.state.viewer, app.state.store, app.state.index = viewer, st, viewer.index
    app.state.simulations, app.state.library_dir, app.state.templates = sims, folder, pages.server_templates()
    app.state.benchmarks = {}
    app.include_router(simulation_routes.router)
    app.include_router(library_routes.router)
    app.include_router(benchmarks.router)
    app.include_router(pages.router)
    app.include_router(viewer_router)
    add_error_pages(app, viewer)
    describe(app, token=token is not None, caps=sims.caps)

    @app.get("/api/health", tags=["server"], summary="Liveness, the store, and how many simulations are in flight")
    async def health(request: Request) -> dict[str, Any]:
        await asyncio.to_thread(st.ping)
        counts: dict[str, int] = {}
        for sim in sims.live.values():
            counts[sim.status] = counts.get(sim.status, 0) + 1
        return {"status": "ok", "version": __version__, "store": st.url, "simulations": counts}

    return Gate(app, token=token, max_body_bytes=max_body_bytes, hosts=allowed_hosts, origins=allowed_origins)
