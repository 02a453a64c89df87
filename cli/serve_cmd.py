"""``sotopia-env serve``: the simulation server (REST, WebSocket streams, the viewer, play pages).

Like Jupyter, it needs a token unless told otherwise: without ``--token`` (or ``$SOTOPIA_ENV_TOKEN``) it makes a
random one and prints the URL with it once; opening that URL sets the browser's cookie. ``--no-token`` turns
the token off, on loopback only.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sotopia_env.cli.common import console, fail
from sotopia_env.cli.listen import bind_or_fail, serve_on
from sotopia_env.cli.options import (
    AllowedHost,
    AllowedOrigin,
    ApiBase,
    ScenariosDir,
    Store,
    model_servers,
    served_hosts_or_fail,
)
from sotopia_env.episodes.job_fields import (
    DEFAULT_CONCURRENCY,
    DEFAULT_TURN_TIMEOUT,
    HTTP_EPISODES_PER_SCENARIO,
    HTTP_MAX_PER_CLIENT,
    HTTP_MAX_TURNS,
    MAX_CONCURRENCY,
    MAX_TURNS_LIMIT,
)


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
        DEFAULT_CONCURRENCY,
        "--concurrency",
        min=1,
        max=MAX_CONCURRENCY,
        help="Model calls in flight at once, across every simulation and benchmark together (also the most "
        "concurrency a benchmark may ask for).",
    ),
    api_base: list[str] = ApiBase,
    allow_api_base: list[str] = typer.Option(
        None,
        "--allow-api-base",
        metavar="URL_PREFIX",
        help="A model server a request's api_base may name besides the --api-base ones (repeatable): URLs under "
        "this prefix (same scheme, host and port). The server's API keys go to these servers.",
    ),
    allow_provider: list[str] = typer.Option(
        None,
        "--allow-provider",
        metavar="NAME",
        help="A litellm provider (openai, anthropic, ...) whose own endpoint a model spec without an api_base may "
        "call (repeatable). Default: none; a spec that would call a provider's default endpoint (ollama/x: "
        "localhost:11434) is refused with a 403.",
    ),
    allowed_origin: list[str] = AllowedOrigin,
    forwarded_allow_ips: list[str] = typer.Option(
        None,
        "--forwarded-allow-ips",
        metavar="ADDRESS",
        help="A proxy (an IP address or network) whose X-Forwarded-For and X-Forwarded-Proto are trusted "
        "(repeatable). Default: none, so a client cannot pose as another (--max-per-client) with a header.",
    ),
    allow_code_agents: bool = typer.Option(
        False, "--allow-code-agents", help="Accept agent specs that load code (module:Class) over HTTP."
    ),
    turn_timeout: float = typer.Option(
        DEFAULT_TURN_TIMEOUT,
        "--turn-timeout",
        min=1.0,
        help="Seconds a human seat has for a move; then its turn is 'none'.",
    ),
    max_per_client: int = typer.Option(
        HTTP_MAX_PER_CLIENT,
        "--max-per-client",
        min=1,
        help="Queued or running simulations and benchmarks per client (its address).",
    ),
    max_turns: int = typer.Option(
        HTTP_MAX_TURNS,
        "--max-turns",
        min=1,
        max=MAX_TURNS_LIMIT,
        help="The most turns a simulation or benchmark over HTTP may ask for (a 422 names the field above it).",
    ),
    max_episodes_per_scenario: int = typer.Option(
        HTTP_EPISODES_PER_SCENARIO,
        "--max-episodes-per-scenario",
        min=1,
        help="The most episodes_per_scenario a benchmark over HTTP may ask for (its concurrency: --concurrency).",
    ),
    library_dir: Path = typer.Option(
        None,
        "--library-dir",
        help="Where POST /api/scenarios and /api/characters keep entries (default: user data dir).",
    ),
    scenarios_dir: list[Path] = ScenariosDir,
) -> None:
    """Serve the API, the simulations' live streams, the viewer and human play pages."""
    try:
        import uvicorn  # noqa: F401  (the extra is there)

        from sotopia_env.server import create_server
    except ImportError as exc:
        missing = exc.name or "a dependency"
        raise fail(
            f"the server needs the 'view' extra ({missing} is missing): pip install 'sotopia-env[view]'"
        ) from None
    from sotopia_env.episodes.store import StoreError
    from sotopia_env.library import LibraryError
    from sotopia_env.server.security import DEFAULT_MAX_BODY, forwarding_proxies, served_origins, start_token

    servers, allowed_servers = model_servers(api_base), model_servers(allow_api_base, "--allow-api-base")
    try:
        token, made = start_token(host, token, no_token)
        origins, proxies = served_origins(allowed_origin or []), forwarding_proxies(forwarded_allow_ips or [])
    except ValueError as exc:
        raise fail(str(exc)) from None
    hosts = served_hosts_or_fail(host, allowed_host, token)
    try:
        app = create_server(
            store,
            token=token,
            concurrency=concurrency,
            api_base=servers,
            allowed_api_bases=allowed_servers,
            allowed_providers=allow_provider or (),
            allowed_hosts=hosts,
            allowed_origins=origins,
            allow_code_agents=allow_code_agents,
            library_dir=library_dir,
            scenarios_dir=scenarios_dir,
            turn_timeout_s=turn_timeout,
            max_per_client=max_per_client,
            max_turns=max_turns,
            max_episodes_per_scenario=max_episodes_per_scenario,
        )
    except (StoreError, LibraryError, ValueError) as exc:
        raise fail(str(exc)) from None
    sock = bind_or_fail(host, port)
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
    serve_on(sock, app, forwarded_allow_ips=proxies, ws="websockets-sansio", ws_max_size=DEFAULT_MAX_BODY)
