"""``sotopia-env serve``: one FastAPI app to start, stream, watch and play episodes over HTTP and WebSocket
(``server.app.create_server``). Needs the ``view`` extra."""

from sotopia_env.server.app import create_server

__all__ = ["create_server"]
