"""``sotopia-env view``: a read-only local web app over the episode store.

On loopback it needs no token (unless ``--token`` gives one). Anywhere else it needs one, as ``serve`` does
(``security.start_token``): ``--token`` or ``$SOTOPIA_ENV_TOKEN``, else a random one, printed once in the URL to
open; ``--no-token`` is for loopback only.
"""

from __future__ import annotations

import typer

from sotopia_env.cli.common import console, fail
from sotopia_env.cli.listen import bind_or_fail, serve_on
from sotopia_env.cli.options import AllowedHost, Store, served_hosts_or_fail


def view(
    store: str = Store,
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Address to bind. The default serves this machine only; any other address needs a token.",
    ),
    allowed_host: list[str] = AllowedHost,
    token: str = typer.Option(
        None,
        "--token",
        help="The token every page needs ('Authorization: Bearer TOKEN', or the cookie ?token=TOKEN sets). "
        "Default: none on loopback; elsewhere $SOTOPIA_ENV_TOKEN, else a random one, printed in the URL at start.",
    ),
    no_token: bool = typer.Option(False, "--no-token", help="Serve without a token (loopback only)."),
) -> None:
    """Browse episodes, transcripts, scores and reports in your browser (read-only; works offline)."""
    try:
        import uvicorn  # noqa: F401  (the extra is there)

        from sotopia_env.server.viewer import create_app
    except ImportError as exc:
        missing = exc.name or "a dependency"
        hint = "pip install 'sotopia-env[view]'"
        raise fail(f"the viewer needs the 'view' extra ({missing} is missing): {hint}") from None
    from sotopia_env.episodes.store import StoreError
    from sotopia_env.server.security import start_token

    try:
        token, made = start_token(host, token, no_token, always=False)
    except ValueError as exc:
        raise fail(str(exc)) from None
    hosts = served_hosts_or_fail(host, allowed_host, token)
    try:
        app = create_app(store, warm=True, allowed_hosts=hosts, token=token)
    except StoreError as exc:
        raise fail(str(exc)) from None
    sock = bind_or_fail(host, port)
    local = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # a wildcard's URL: one its Host check answers
    url = f"http://{f'[{local}]' if ':' in local else local}:{port}/"
    auth = f"\nopen {url}?token={token}" if made else (" (token required)" if token else "")
    console.print(f"serving {app.state.store.url} at {url}  (Ctrl-C to stop){auth}", highlight=False, soft_wrap=True)
    serve_on(sock, app)
