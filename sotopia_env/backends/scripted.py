"""A backend that plays back canned answers. For tests only."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from sotopia_env.backends.base import ChatRequest, Completion, ServiceFailure

Reply = str | Exception
Responder = Callable[[ChatRequest], Reply]


class ScriptedBackend:
    """Answers requests from a list (in order, cycling if ``cycle``) or from a function of the request.

    An ``Exception`` in the script becomes a failed ``Completion`` carrying its message; a ``ServiceFailure``
    one whose service failed (``Completion.failure``: its ``kind``), as a key refused or a server down would.
    Every request is kept in ``self.requests`` for inspection.
    """

    def __init__(
        self,
        replies: Iterable[Reply] | Responder,
        model: str = "scripted",
        cycle: bool = False,
        delay_s: float = 0.0,
    ) -> None:
        self.model = model
        self._fn = replies if callable(replies) else None
        self._replies = [] if callable(replies) else list(replies)
        self._cycle = cycle
        self._i = 0
        self.delay_s = delay_s
        self.requests: list[ChatRequest] = []

    def _next(self, request: ChatRequest) -> Reply:
        if self._fn is not None:
            return self._fn(request)
        if self._i >= len(self._replies):
            if not self._cycle or not self._replies:
                return RuntimeError("scripted backend ran out of replies")
            self._i = 0
        reply = self._replies[self._i]
        self._i += 1
        return reply

    async def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        out = []
        for request in requests:
            self.requests.append(request)
            reply = self._next(request)
            prompt_tokens = sum(len(m["content"].split()) for m in request.messages)
            if isinstance(reply, Exception):
                failure = reply.kind if isinstance(reply, ServiceFailure) else None
                out.append(Completion(text="", prompt_tokens=prompt_tokens, error=str(reply), failure=failure))
            else:
                out.append(Completion(text=reply, prompt_tokens=prompt_tokens, completion_tokens=len(reply.split())))
        return out
