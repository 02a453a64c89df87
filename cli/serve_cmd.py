"""``sotopia-env serve``: the simulation server (REST, WebSocket streams, the viewer, play pages)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from sotopia_env.cli.common import console, fail
from sotopia_env.cli.options import ApiBase, ScenariosDir, Store, api_base_value
from sotopia_env.cli.view_cmd import port_free


def serve(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; any but loopback needs a token."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    store: str = Store,
    token: str = typer.Option(
        None, "--token", help="Require 'Authorization: Bearer TOKEN' on every route (default: $SOTOPIA_ENV_TOKEN)."
    ),
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=1024, help="Simulations played at once."),
    api_base: list[str] = ApiBase,
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

    token = token or os.environ.get(TOKEN_ENV) or None
    refused = bind_allowed(host, token)
    if refused:
        raise fail(refused)
    try:
        app = create_server(
            store,
            token=token,
            concurrency=concurrency,
            api_base=api_base_value(api_base),
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
    shown = f"[{host}]" if ":" in host else host
    auth = " (token required)" if token else ""
    console.print(
        f"serving {app.app.state.store.url} at http://{shown}:{port}/{auth}; API: http://{shown}:{port}/docs "
        "(Ctrl-C to stop)",
        highlight=False,
    )
    from sotopia_env.episodes.gc_tuning import tune_gc_for_batch

    tune_gc_for_batch()  # a server is a long batch: the imports frozen, young collections less often
    uvicorn.run(app, host=host, port=port, log_level="warning", ws="websockets-sansio")
