"""The server's preflight: a simulation or a benchmark is queued only once the model services it will call answer.

The same check as the CLI's (``episodes.preflight``): one one-token call per (model, server) behind its seats and
its judge, after planning (so only servers the operator listed are reached) and before anything is queued. A key
refused or missing, a server that does not answer, a model the server does not serve: the POST is answered 424
with the one line that names the model, the endpoint and the fix, and nothing is queued. A (model, server) that
answered is not asked again for ``REMEMBER_S`` seconds: a busy server does not probe on every request. Local models
(they load where they play), human seats, rule agents and rule judges call no service.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from sotopia_env.backends.endpoints import ModelServers
from sotopia_env.backends.resolve import is_local_spec
from sotopia_env.episodes.preflight import PreflightFailed, acheck_services
from sotopia_env.server.model_calls import calls_a_model
from sotopia_env.server.requests import RequestRefused

REMEMBER_S = 300.0


class ServiceDown(RequestRefused):
    """A model service the request needs cannot work (a key refused, a server down, a model not served)."""

    status = 424


def _parties(agents: Iterable[str], evaluator: str, dimensions: str, api_base: ModelServers | None) -> list[Any]:
    """The agents and the judge of ``agents`` and ``evaluator`` that call a model service (built, not run)."""
    from sotopia_env.agents.loading import load_agent
    from sotopia_env.evaluators import make_evaluator

    remote = [s for s in dict.fromkeys(agents) if calls_a_model(s) and not is_local_spec(s)]
    parties: list[Any] = [load_agent(spec, api_base=api_base) for spec in remote]
    if calls_a_model(evaluator) and not is_local_spec(evaluator):
        parties.append(make_evaluator(evaluator, dimensions, api_base))
    return parties


async def check_model_services(
    agents: Iterable[str], evaluator: str, dimensions: str, api_base: ModelServers | None
) -> None:
    """``ServiceDown`` (424, one line) where a model service behind ``agents`` or ``evaluator`` cannot work."""
    try:  # in a thread: building a litellm agent imports litellm (seconds of a stalled loop)
        parties = await asyncio.to_thread(_parties, list(agents), evaluator, dimensions, api_base)
        await acheck_services(parties, remember_s=REMEMBER_S)
    except PreflightFailed as exc:
        raise ServiceDown(str(exc)) from None
