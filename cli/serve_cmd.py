"""``sotopia-env serve``: the simulation server (REST, WebSocket streams, the viewer, play pages).

Like Jupyter, it needs a token unless told otherwise: without ``--token`` (or ``$SOTOPIA_ENV_TOKEN``) it makes a
random one and prints the URL with it once; opening that URL sets the browser's cookie. ``--no-token`` turns
the token off, on loopback only.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import typer

from sotopia_env.cli.common import console, fail
from sotopia_env.cli.options import (
    AllowedHost,
    ApiBase,
    ScenariosDir,
    Store,
    model_servers,
    served_hosts_or_fail,
)
from sotopia_env.cli.view_cmd import port_free
from sotopia_env.episodes.job_fields import DEFAULT_CONCURRENCY, MAX_CONCURRENCY


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (loopback by default)."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    store: str = Store,
    token: str = typer.Option(
        None,
        "--token",
        help="The token every route needs ('Authorization: Bearer TOKEN', or the cookie ?token=TOKEN sets). "
        "Default: $SOTOPIA_ENV_TOKEN, else a random one, printed in the URL at start.",
    ),
    no_token: bool = typer.Option(
        False,
        "--no-token",
        help="Serve without a token (loopback only): every local user and process may then run models on your keys.",
    ),
    allowed_host: list[str] = AllowedHost,
    concurrency: int = typer.Option(
        DEFAULT_CONCURRENCY, "--concurrency", min=1, max=MAX_CONCURRENCY, help="Simulations played at once."
    ),
    api_base: list[str] = ApiBase,
    allow_api_base: list[str] = typer.Option(
        None,
        "--allow-api-base",
        metavar="URL_PREFIX",
        help="A model server a request's api_base may name besides the --api-base ones (repeatable): URLs under "
        "this prefix (same scheme, host and port). The server's API keys go to these servers.",
    ),
    allow_code_agents: bool = typer.Option(
        False, "--allow-code-agents", help="Accept agent specs that load code (module:Class) over HTTP."
    ),
    turn_timeout: float = typer.Option(
        300.0, "--turn-timeout", min=1.0, help="Seconds a human seat has for a move; then its turn is 'none'."
    ),
    max_per_client: int = typer.Option(64, "--max-per-client", min=1, help="Queued or running simulations per client."),
    library_dir: Path = typer.Option(
        None,
        "--library-dir",
        help="Where POST /api/scenarios and /api/characters keep entries (default: user data dir).",
    ),
    scenarios_dir: list[Path] = ScenariosDir,
) -> None:
    """Serve the API, the simulations' live streams, the viewer and human play pages."""
    try:
        import uvicorn

        from sotopia_env.server import create_server
    except ImportError as exc:
        missing = exc.name or "a dependency"
        raise fail(
            f"the server needs the 'view' extra ({missing} is missing): pip install 'sotopia-env[view]'"
        ) from None
    from sotopia_env.episodes.store import StoreError
    from sotopia_env.library import LibraryError
    from sotopia_env.server.security import TOKEN_ENV, bind_allowed

    servers, allowed_servers = model_servers(api_base), model_servers(allow_api_base, "--allow-api-base")
    token = token or os.environ.get(TOKEN_ENV) or None
    if no_token and token:
        raise fail(f"--no-token and a token (--token or ${TOKEN_ENV}) contradict each other; drop one")
    made = token is None and not no_token
    token = secrets.token_urlsafe(24) if made else token
    refused = bind_allowed(host, token)
    if refused:
        raise fail(refused)
    hosts = served_hosts_or_fail(host, allowed_host, token)
    try:
        app = create_server(
            store,
            token=token,
            concurrency=concurrency,
            api_base=servers,
            allowed_api_bases=allowed_servers,
            allowed_hosts=hosts,
            allow_code_agents=allow_code_agents,
            library_dir=library_dir,
            scenarios_dir=scenarios_dir,
            turn_timeout_s=turn_timeout,
            max_per_client=max_per_client,
        )
    except (StoreError, LibraryError) as exc:
        raise fail(str(exc)) from None
    if not port_free(host, port):
        raise fail(f"cannot listen on {host}:{port}: the address is in use or not available; try another --port")
    local = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # a wildcard's URL: one its Host check answers
    url = f"http://{f'[{local}]' if ':' in local else local}:{port}/"
    auth = f"\nopen {url}?token={token}" if made else (" (token required)" if token else " (no token)")
    console.print(
        f"serving {app.app.state.store.url} at {url}; API: {url}docs (Ctrl-C to stop){auth}",
        highlight=False,
        soft_wrap=True,  # the URL stays on one line, whatever the terminal's width
    )
    from sotopia_env.episodes.gc_tuning import tune_gc_for_batch

    tune_gc_for_batch()  # a server is a long batch: the imports frozen, young collections less often
    uvicorn.run(app, host=host, port=port, log_level="warning", ws="websockets-sansio")
