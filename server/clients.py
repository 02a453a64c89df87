"""Who a request comes from, and how many jobs (simulations and benchmarks together) each client may have queued or
running (``serve --max-per-client``).

A client is the address the connection comes from. Forwarded headers (``X-Forwarded-For``) are honoured only from
the proxies the operator lists (``serve --forwarded-allow-ips``; uvicorn rewrites the address before it gets here,
``cli.listen.serve_on``), so a client cannot pose as another, or as many, with a header.
"""

from __future__ import annotations

from fastapi import HTTPException, Request, WebSocket


def client_of(request: Request | WebSocket) -> str:
    return request.client.host if request.client is not None else ""


def active_jobs(request: Request, client: str) -> int:
    """The simulations and benchmarks of ``client`` that are queued or running."""
    sims = request.app.state.simulations
    benchmarks = request.app.state.benchmarks.values()
    return sims.active_of(client) + sum(b.client == client and b.status == "running" for b in benchmarks)


def admitted(request: Request) -> str:
    """The client of ``request``, when it may start one more job; else a 429 saying so."""
    client, limit = client_of(request), request.app.state.simulations.max_per_client
    if active_jobs(request, client) >= limit:
        raise HTTPException(429, f"{limit} simulations and benchmarks of yours are queued or running; wait for some")
    return client
