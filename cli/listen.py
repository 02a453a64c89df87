"""Binding the port of ``serve``, ``view`` and ``openenv`` once, the way uvicorn binds it, then serving on it.

The socket is bound here with ``SO_REUSEADDR`` (as uvicorn and asyncio bind theirs), so a server restarted after a
crash or a ``kill -9`` listens at once even while its old connections sit in TIME_WAIT; a port another process
listens on is still refused, with one line, before anything is printed. uvicorn then serves on that very socket:
nothing can take the port between the check and the start.
"""

from __future__ import annotations

import socket
from typing import Any

from sotopia_env.cli.common import fail


def bind_or_fail(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (not yet listening), or a one-line error naming the address."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise fail(
            f"cannot listen on {host}:{port}: {exc.strerror or exc} (another server on this port?); try another --port"
        ) from None
    return sock


def serve_on(sock: socket.socket, app: Any, **config: Any) -> None:
    """Run ``app`` under uvicorn on ``sock`` (from ``bind_or_fail``) until stopped; ``config``: uvicorn's options."""
    import uvicorn

    host, port = sock.getsockname()[:2]
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", **config)).run(sockets=[sock])
