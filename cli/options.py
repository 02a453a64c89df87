"""Options shared by several commands."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from pydantic import BaseModel

from sotopia_env.episodes.job_fields import (
    DEFAULT_CONCURRENCY,
    DEFAULT_MAX_TURNS,
    DEFAULT_MODEL,
    DEFAULT_RETRY_SECONDS,
    MAX_CALLS,
    MAX_CALLS_HELP,
    MAX_CONCURRENCY,
    MAX_TURNS_LIMIT,
)

if TYPE_CHECKING:
    from sotopia_env.backends.endpoints import ModelServers
    from sotopia_env.episodes.ray_batch import RayConfig

M = TypeVar("M", bound=BaseModel)


def _field_facts(model: type[BaseModel], name: str) -> tuple[dict[str, Any], str | None]:
    """The ``min``/``max`` (as typer takes them) and the description a spec's field declares, also where they sit
    inside its type (``Annotated[int, Field(...)] | None``)."""
    import typing

    field = model.model_fields[name]
    metadata, description = list(field.metadata), field.description
    pending = [field.annotation]
    while pending:
        annotation = pending.pop()
        for meta in getattr(annotation, "__metadata__", ()):
            metadata += [meta, *getattr(meta, "metadata", [])]
            description = description or getattr(meta, "description", None)
        pending += [a for a in typing.get_args(annotation) if a is not type(None)]
    limits: dict[str, Any] = {}
    for meta in metadata:
        if getattr(meta, "ge", None) is not None:
            limits["min"] = meta.ge
        if getattr(meta, "le", None) is not None:
            limits["max"] = meta.le
    return limits, description


def field_limits(model: type[BaseModel], name: str) -> dict[str, Any]:
    """The ``min``/``max`` a spec's field declares (its ``ge``/``le``), as typer takes them."""
    return _field_facts(model, name)[0]


def spec_option(model: type[BaseModel], name: str, *flags: str, help: str | None = None, **extra: Any) -> Any:
    """A typer option for the field ``name`` of the spec ``model``: its default, its limits and its description
    (``help`` overrides it), so that a command's options and the HTTP body of the same spec take the same values.
    ``flags``: the option's names (default ``--field-name``)."""
    field = model.model_fields[name]
    limits, description = _field_facts(model, name)
    default = None if field.is_required() else field.get_default(call_default_factory=True)
    return typer.Option(
        default,
        *(flags or (f"--{name.replace('_', '-')}",)),
        help=help if help is not None else description,
        **limits,
        **extra,
    )


def parsed_spec(model: type[M], options: dict[str, Any]) -> M:
    """The options as a ``model`` spec (validated with ``context={"flags": True}``, so that its messages name
    options); a value it refuses is a usage error, one line naming the option."""
    from pydantic import ValidationError

    from sotopia_env.cli.common import fail

    try:
        return model.model_validate(options, context={"flags": True})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = f"--{str(first['loc'][0]).replace('_', '-')}: " if first["loc"] else ""
        raise fail(f"{where}{first['msg'].removeprefix('Value error, ')}") from None


ScenariosDir = typer.Option(None, "--scenarios-dir", help="Extra scenario/character YAML files or directories.")
Store = typer.Option(
    None,
    "--store",
    help="Episode store URL: sqlite:///path.db or redis://host:port/0. "
    "Default: SQLite in the user data dir ($SOTOPIA_ENV_STORE overrides).",
)
StoreRetry = typer.Option(
    DEFAULT_RETRY_SECONDS,
    "--store-retry-seconds",
    min=0,
    help="Retry a failed store write this long (Redis down, SQLite locked) before saving the episodes to a spill "
    "file that 'episodes import' restores.",
)


def model_servers(values: list[str] | None, option: str = "--api-base") -> ModelServers | None:
    """The servers a repeatable URL option names (repeated and/or comma-separated), parsed once, here; a URL that
    is not http(s) is a usage error naming ``option``."""
    from sotopia_env.backends.endpoints import ModelServers

    try:
        return ModelServers.parse(values or None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=option) from None


ApiBase = typer.Option(
    None,
    "--api-base",
    help="Base URL of an OpenAI-compatible server (vLLM, llama.cpp, Ollama). Several servers: repeat the flag "
    "or separate URLs by commas; each call goes to the one with the fewest calls outstanding.",
)
MaxTurns = typer.Option(
    DEFAULT_MAX_TURNS, "--max-turns", min=1, max=MAX_TURNS_LIMIT, help="Truncate an episode after this many turns."
)
Concurrency = typer.Option(
    DEFAULT_CONCURRENCY, "--concurrency", min=1, max=MAX_CONCURRENCY, help="Episodes in flight at once."
)
AllowedHost = typer.Option(
    None,
    "--allowed-host",
    metavar="NAME",
    help="A Host name to answer besides localhost, 127.0.0.1, [::1] and --host (repeatable; '*.example.com' "
    "for subdomains). Any other Host is refused, against DNS rebinding.",
)
AllowedOrigin = typer.Option(
    None,
    "--allowed-origin",
    metavar="ORIGIN",
    help="An origin (scheme://host[:port]) whose pages may POST and open WebSockets besides the server's own "
    "(repeatable), e.g. the public origin of a reverse proxy.",
)


def served_hosts_or_fail(host: str, allowed: list[str] | None, token: str | None) -> list[str]:
    """The Host names a server bound to ``host`` answers (``security.served_hosts``); a malformed name, or ``*``
    without a token, is a usage error. Bound to a wildcard address, it says which names clients may use."""
    from sotopia_env.cli.common import console, fail
    from sotopia_env.server.security import WILDCARD_ADDRESSES, served_hosts

    try:
        hosts = served_hosts(host, allowed or [])
    except ValueError as exc:
        raise fail(str(exc)) from None
    if "*" in hosts and not token:
        raise fail("--allowed-host '*' answers any Host, which DNS rebinding needs; only with a token")
    if host in WILDCARD_ADDRESSES and not allowed:
        console.print(
            f"note: bound to {host}, this answers only Host {', '.join(hosts)}; "
            "add --allowed-host NAME for each name clients use",
            highlight=False,
            soft_wrap=True,
        )
    return hosts


MaxCalls = typer.Option(
    None,
    "--max-calls",
    min=1,
    max=MAX_CALLS,
    help=MAX_CALLS_HELP,
)
Evaluator = typer.Option(
    DEFAULT_MODEL,
    "--evaluator",
    help="The judge: a model spec, 'rule-based' (an offline smoke test, not a measurement), 'verifiable' (exact "
    "goal on verifiable scenarios), or 'none' to skip rating.",
)


def _agents_path(folders: list[Path] | None) -> list[Path] | None:
    from sotopia_env.agents.loading import AgentSpecError, add_agents_path
    from sotopia_env.cli.common import user_errors

    with user_errors(AgentSpecError):
        add_agents_path(folders or [])
    return folders


AgentsPath = typer.Option(
    None,
    "--agents-path",
    callback=_agents_path,
    help="A folder to import module:Class agents from (repeatable); the current folder is always searched first.",
)
Dimensions = typer.Option(
    "sotopia", "--dimensions", help="'sotopia' (all seven), 'goal', or a comma list of SOTOPIA dimension names."
)


def library(extra: list[Path] | None):
    from sotopia_env.cli.common import user_errors
    from sotopia_env.library import LibraryError, load_library

    with user_errors(LibraryError, OSError):
        return load_library(extra or [])


RayAddress = typer.Option(
    None,
    "--ray",
    metavar="ADDRESS",
    help="Run the episodes on Ray actors: '--ray local' starts a local cluster; '--ray auto' joins the one "
    "'ray start --head' runs here; HOST:PORT or ray://HOST:10001 a remote one (needs a redis:// store).",
)
RayWorkers = typer.Option(2, "--ray-workers", min=1, max=10_000, help="Ray actors sharing the batch (with --ray).")
RayGpus = typer.Option(
    0.0, "--ray-gpus-per-worker", min=0, help="GPUs each Ray actor reserves; 1 gives each its own local model."
)


RayPinEndpoints = typer.Option(
    False,
    "--ray-pin-endpoints",
    help="With --ray and several --api-base servers: each Ray actor calls only its own share of them "
    "(a slice, or one server each when there are more actors than servers) instead of all.",
)


def ray_config(address: str | None, workers: int, gpus: float, pin_endpoints: bool = False) -> RayConfig | None:
    """The ``RayConfig`` the --ray options ask for; None without --ray."""
    if address is None:
        return None
    from sotopia_env.episodes.ray_batch import RayConfig

    return RayConfig(address=address, num_workers=workers, gpus_per_worker=gpus, pin_endpoints=pin_endpoints)
