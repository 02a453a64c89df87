"""Binding the port of ``serve``, ``view`` and ``openenv`` once, the way uvicorn binds it, then serving on it.

The socket is bound here with ``SO_REUSEADDR`` (as uvicorn and asyncio bind theirs), so a server restarted after a
crash or a ``kill -9`` listens at once even while its old connections sit in TIME_WAIT; a port another process
listens on is still refused, with one line, before anything is printed. uvicorn then serves on that very socket:
nothing can take the port between the check and the start.

Forwarded headers (``X-Forwarded-For``, ``X-Forwarded-Proto``) are trusted only from the addresses the operator
lists (``serve --forwarded-allow-ips``; none by default): uvicorn's own default trusts 127.0.0.1, so any local
process could pose as another client (and reset ``--max-per-client``) with one header.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from sotopia_env.cli.common import fail


def bind_or_fail(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening), or a one-line error naming the address."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto named: asyncio sets TCP_NODELAY only on sockets whose proto is IPPROTO_TCP, and without it every answer
    # on a kept-alive connection waits ~40 ms for the client's delayed ACK (Nagle)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise fail(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (another server on this port?); try another --port"
        ) from None
    return sock


def serve_on(sock: socket.socket, app: Any, forwarded_allow_ips: Sequence[str] = (), **config: Any) -> None:
    """Run ``app`` under uvicorn on ``sock`` (from ``bind_or_fail``) until stopped; ``forwarded_allow_ips``: the
    proxies whose forwarded headers are trusted (none: no proxy headers at all); ``config``: uvicorn's options."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    proxies = {"proxy_headers": bool(forwarded_allow_ips), "forwarded_allow_ips": list(forwarded_allow_ips) or None}
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", **proxies, **config)).run(
        sockets=[sock]
    )
