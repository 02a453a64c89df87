"""The preflight: before the first episode, one cheap call to every model service a run will use.

A wrong key, a server that is down, a model the server does not serve: each would otherwise surface as one failed
episode after another. ``check_services`` finds them first: every distinct (model, server) pair behind the
agents and the judge gets one one-token call (``remote.RemoteBackend.probe``), all at once, each bounded by
``PREFLIGHT_TIMEOUT_S``. The first failure raises ``PreflightFailed``: one line naming the model, the endpoint and
the fix (which variable or flag). ``run``, ``benchmark``, ``train`` and the server's simulations and benchmarks
call it after building their agents and judge, before anything is played or stored.

Only services are probed: the local backend (its model loads when built: a missing model fails there) and
scripted backends have nothing to reach. A service that answers the probe then fails mid-run fails the episodes
it hits (``backends.base.ServiceFailure``): never a score.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from sotopia_env.backends.base import ServiceFailure
from sotopia_env.backends.remote import RemoteBackend
from sotopia_env.errors import UserError

PREFLIGHT_TIMEOUT_S = 15.0
# When each (backend type, model, server) last answered a probe: a caller that checks often (the web server, at
# every request) passes ``remember_s`` so as not to ask again within it.
_passed: dict[tuple[str, str, str | None], float] = {}


class PreflightFailed(UserError):
    """A model service a run needs cannot work: one line naming the model, the endpoint and the fix."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def backends_of(parties: Iterable[Any]) -> list[RemoteBackend]:
    """The distinct remote backends behind ``parties`` (agents, evaluators or backends; None is skipped)."""
    found: dict[int, RemoteBackend] = {}
    for party in parties:
        backend = party if isinstance(party, RemoteBackend) else getattr(party, "backend", None)
        if isinstance(backend, RemoteBackend):
            found.setdefault(id(backend), backend)
    return list(found.values())


def endpoint_name(backend: RemoteBackend, url: str | None) -> str:
    """Where ``backend`` sends its calls: ``url``, or its provider's own endpoint."""
    return url if url is not None else f"{_litellm_facts(backend)[0]}'s own endpoint"


def _litellm_facts(backend: RemoteBackend) -> tuple[str, list[str]]:
    """The provider of ``backend``'s model and the key variables it reads that are not set, as litellm knows."""
    model = getattr(backend, "litellm_model", backend.model)
    try:
        from sotopia_env.backends.litellm_backend import import_litellm

        litellm = import_litellm()
        provider = litellm.get_llm_provider(model=model)[1]
        missing = litellm.validate_environment(model=model).get("missing_keys") or []
    except Exception:
        return "the provider", []
    return str(provider), [str(k) for k in missing]


def _fix(backend: RemoteBackend, url: str | None, kind: str) -> str:
    """What to change for a failure of ``kind``."""
    if kind == "auth":
        if url is not None:
            return "set SOTOPIA_API_KEY (or OPENAI_API_KEY) to the key that server expects"
        return f"set {_key_variable(backend)} to a valid key"
    if kind == "model_not_found":
        where = f"GET {url.rstrip('/')}/models lists what it serves; " if url is not None else ""
        return f"check the model name ({where}--api-base must end where /chat/completions begins, e.g. .../v1)"
    if kind == "unreachable":
        return "start the server or correct --api-base" if url is not None else "check your network and the provider"
    if kind == "server_error":
        return "the service is failing: try again later, or use another server"
    return "check the model spec and --api-base"


def _key_variable(backend: RemoteBackend) -> str:
    """The environment variable the provider of ``backend``'s model reads its key from."""
    keys = [k for k in _litellm_facts(backend)[1] if k.endswith("_KEY")]
    return " / ".join(keys) if keys else "the provider's API key variable (e.g. OPENAI_API_KEY)"


def describe_failure(backend: RemoteBackend, url: str | None, failure: ServiceFailure) -> str:
    """One line: the model, the endpoint, what failed and the fix."""
    what = {
        "auth": "the key was refused or is missing",
        "model_not_found": "the server does not serve this model (or has no such path)",
        "unreachable": "nothing answers there",
        "server_error": "the server failed",
        "unsupported": "a request this backend cannot make",
    }.get(failure.kind, "the request was refused")
    detail = str(failure).removeprefix(f"{backend.model}: ").removeprefix(f"{backend.model} at {url}: ")
    where = endpoint_name(backend, url)
    return f"model {backend.model!r} at {where}: {what} ({detail}); {_fix(backend, url, failure.kind)}"


async def acheck_services(
    parties: Iterable[Any], timeout_s: float = PREFLIGHT_TIMEOUT_S, remember_s: float = 0.0
) -> int:
    """Probe every (model, server) behind ``parties`` at once; raise ``PreflightFailed`` for the first that fails.
    Returns how many were probed: those that answered within the last ``remember_s`` seconds are not asked again."""
    now = time.monotonic()
    probes: list[tuple[RemoteBackend, str | None]] = []
    for backend in backends_of(parties):
        for url in backend.api_base.urls if backend.api_base else (None,):
            answered = _passed.get((type(backend).__name__, backend.model, url))
            if answered is None or now - answered >= remember_s:
                probes.append((backend, url))
    results = await asyncio.gather(*(backend.probe(url, timeout_s) for backend, url in probes))
    for (backend, url), failure in zip(probes, results, strict=True):
        if failure is not None:
            raise PreflightFailed(describe_failure(backend, url, failure), failure.kind)
        _passed[(type(backend).__name__, backend.model, url)] = time.monotonic()
    return len(probes)


def check_services(parties: Iterable[Any], timeout_s: float = PREFLIGHT_TIMEOUT_S) -> int:
    """``acheck_services`` from synchronous code (the CLI), outside any running event loop."""
    return asyncio.run(acheck_services(list(parties), timeout_s))
