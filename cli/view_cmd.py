"""``sotopia-env view``: a read-only local web app over the episode store."""

from __future__ import annotations

import socket

import typer

from sotopia_env.cli.common import console, fail
from sotopia_env.cli.options import AllowedHost, Store, served_hosts_or_fail


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def view(
    store: str = Store,
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to bind. The default serves this machine only; the viewer has no login."
    ),
    allowed_host: list[str] = AllowedHost,
) -> None:
    """Browse episodes, transcripts, scores and reports in your browser (read-only; works offline)."""
    try:
        import uvicorn

        from sotopia_env.server.viewer import create_app
    except ImportError as exc:
        missing = exc.name or "a dependency"
        hint = "pip install 'sotopia-env[view]'"
        raise fail(f"the viewer needs the 'view' extra ({missing} is missing): {hint}") from None
    from sotopia_env.episodes.store import StoreError

    hosts = served_hosts_or_fail(host, allowed_host, token=None)
    try:
        app = create_app(store, warm=True, allowed_hosts=hosts)
    except StoreError as exc:
        raise fail(str(exc)) from None
    if not port_free(host, port):
        raise fail(f"cannot listen on {host}:{port}: the address is in use or not available; try another --port")
    shown = f"[{host}]" if ":" in host else host
    console.print(f"serving {app.state.store.url} at http://{shown}:{port}/  (Ctrl-C to stop)", highlight=False)
    uvicorn.run(app, host=host, port=port, log_level="warning")
