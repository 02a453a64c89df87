"""``sotopia-env openenv``: our scenarios as an OpenEnv environment server (``server.openenv_app``).

A command of its own, not a mode of ``serve``: OpenEnv's routes live at the root (``/reset``, ``/step``, ``/ws``,
``/health``) and its client sends no token, while ``serve``'s API needs one off loopback and keeps a store. So this
server binds loopback unless told ``--public``, and fixes the partners and the judge itself.
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
    model_servers,
    served_hosts_or_fail,
)
from sotopia_env.limits import DEFAULT_MAX_SESSIONS, DEFAULT_MAX_TURNS


def openenv(
    scenarios: str = typer.Option(
        "verifiable", "--scenarios", help="The scenarios served (a selector: verifiable:train, game:train, hard, IDS)."
    ),
    partner: str = typer.Option(
        None,
        "--partner",
        help="Every other seat's agent (default: rule-partner / rule-player where the family has one).",
    ),
    judge: str = typer.Option(
        None, "--judge", help="The LLM judge of SOTOPIA scenarios (verifiable scenarios and games are judged exactly)."
    ),
    max_turns: int = typer.Option(DEFAULT_MAX_TURNS, "--max-turns", min=1, help="Turn limit of each episode."),
    max_sessions: int = typer.Option(
        DEFAULT_MAX_SESSIONS, "--max-sessions", min=1, max=4096, help="Episodes (WebSockets) at once."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; any but loopback needs --public."),
    port: int = typer.Option(8010, "--port", min=1, max=65535, help="Port to listen on."),
    public: bool = typer.Option(
        False,
        "--public",
        help="Allow a non-loopback --host: OpenEnv's client sends no token, so anyone who reaches it "
        "can play (the scenarios, partners and judge stay this server's).",
    ),  # fmt: skip
    allowed_host: list[str] = AllowedHost,
    allowed_origin: list[str] = AllowedOrigin,
    api_base: list[str] = ApiBase,
    scenarios_dir: list[Path] = ScenariosDir,
) -> None:
    """Serve scenarios on OpenEnv's protocol: one episode per WebSocket session, for OpenEnv's client and trainers."""
    try:
        import uvicorn  # noqa: F401  (the extra is there)

        from sotopia_env.server.openenv_app import create_openenv_app
    except ImportError as exc:
        raise fail(
            f"this command needs the 'openenv' extra ({exc.name} is missing): pip install 'sotopia-env[openenv]'"
        ) from None
    from sotopia_env.library import LibraryError, load_library
    from sotopia_env.server.security import DEFAULT_MAX_BODY, is_loopback, served_origins
    from sotopia_env.training.seat_rows import SessionMaker

    if not (is_loopback(host) or public):
        raise fail(f"refusing to listen on {host}: OpenEnv's client sends no token; pass --public to do it anyway")
    try:
        maker = SessionMaker(load_library([str(p) for p in scenarios_dir or []]), model_servers(api_base))
        hosts = served_hosts_or_fail(host, allowed_host, token=None)
        origins = served_origins(allowed_origin or [])
        app = create_openenv_app(
            scenarios,
            partner,
            judge,
            max_turns,
            max_sessions,
            maker=maker,
            allowed_hosts=hosts,
            allowed_origins=origins,
        )
    except (LibraryError, ValueError) as exc:
        raise fail(str(exc)) from None
    sock = bind_or_fail(host, port)
    shown = f"[{host}]" if ":" in host else host
    console.print(f"OpenEnv server for {scenarios!r} at http://{shown}:{port} (WebSocket /ws; Ctrl-C to stop)")
    serve_on(sock, app, ws_max_size=DEFAULT_MAX_BODY)  # a WebSocket message is capped as an HTTP body is
