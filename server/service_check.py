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

from sotopia_env.episodes.plan import EpisodePlan
from sotopia_env.episodes.preflight import PreflightFailed, acheck_services
from sotopia_env.server.requests import RequestRefused

REMEMBER_S = 300.0


class ServiceDown(RequestRefused):
    """A model service the request needs cannot work (a key refused, a server down, a model not served)."""

    status = 424


async def check_model_services(plan: EpisodePlan) -> None:
    """``ServiceDown`` (424, one line) where a model service behind ``plan``'s agents or judge cannot work (the
    parties ``plan.service_parties`` picks, as the CLI's ``benchmark`` does)."""
    try:  # in a thread: building a litellm agent imports litellm (seconds of a stalled loop)
        parties = await asyncio.to_thread(plan.service_parties)
        await acheck_services(parties, remember_s=REMEMBER_S)
    except PreflightFailed as exc:
        raise ServiceDown(str(exc)) from None
