"""A lean client for OpenAI-compatible chat servers at an ``api_base`` (vLLM, llama.cpp server, SGLang, ...),
or at several (``remote.RemoteBackend`` spreads the calls over them).

It posts ``/chat/completions`` on one pooled ``aiohttp.ClientSession`` per event loop and keeps every
behaviour of the litellm path (``remote.RemoteBackend``: retries, concurrency limit, ``response_format``
json_schema or schema-in-prompt with JSON repair, one-line errors, the key never shown). It exists because
litellm costs 5-9 ms of CPU per call, which caps one event loop at a few hundred calls per second: at 64
concurrent episodes against a 200 ms server litellm reached 41% of the latency-bound ideal, this client 97%
(``benchmarks/throughput.py``).

Sessions come from ``loop_sessions.LoopSessions``: made inside the running loop, closed when it shuts down;
``aclose()`` closes the current loop's session early.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from sotopia_env.backends.base import ChatRequest
from sotopia_env.backends.endpoints import ApiBase
from sotopia_env.backends.loop_sessions import LoopSessions
from sotopia_env.backends.remote import (
    DEFAULT_BACKOFF_BASE_S,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_RETRIES,
    DEFAULT_TIMEOUT_S,
    OPENAI_COMPATIBLE,
    RemoteBackend,
    Reply,
    server_api_key,
)
from sotopia_env.specs import ModelSpec

_JSON = {"Content-Type": "application/json"}


class HTTPError(Exception):
    """A non-200 answer; ``status_code`` and the server's own message."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


def server_model_name(model: ModelSpec | str) -> str:
    """The name the server knows: ``openai/x`` and ``hosted_vllm/x`` are routing prefixes, not part of it."""
    spec = ModelSpec.parse(model)
    return spec.model if spec.provider in OPENAI_COMPATIBLE and spec.model else spec.name


class OpenAIHTTPBackend(RemoteBackend):
    """``POST {api_base}/chat/completions`` over aiohttp; see the module docstring."""

    def __init__(
        self,
        model: ModelSpec | str,
        api_base: ApiBase,
        api_key: str | None = None,
        *,
        structured_output: bool = True,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        backoff_base_s: float = DEFAULT_BACKOFF_BASE_S,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        spec = ModelSpec.parse(model)
        super().__init__(
            spec.text,
            api_base,
            server_api_key(api_key, openai_compatible=True),
            structured_output=structured_output,
            hosted=False,
            max_retries=max_retries,
            timeout_s=timeout_s,
            backoff_base_s=backoff_base_s,
            max_concurrency=max_concurrency,
        )
        self.server_model = server_model_name(spec)
        self._sessions = LoopSessions({"Authorization": f"Bearer {self._api_key}"})

    async def aclose(self) -> None:
        """Close this loop's session now (it is otherwise closed when the loop shuts down)."""
        await self._sessions.aclose()

    async def _send(
        self, request: ChatRequest, messages: list[dict[str, Any]], extra: dict[str, Any], api_base: str | None
    ) -> Reply:
        import aiohttp

        body = {
            "model": self.server_model,
            "messages": messages,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": request.max_new_tokens,
            **extra,
        }
        session = await self._sessions.get()
        timeout = aiohttp.ClientTimeout(total=self.timeout_s)
        url = str(api_base).rstrip("/") + "/chat/completions"
        data = orjson.dumps(body)  # json.dumps was 8% of the client's CPU at 256 concurrent episodes
        async with session.post(url, data=data, headers=_JSON, timeout=timeout) as response:
            raw = await response.read()
            status = response.status
        reply = _json_or_none(raw)
        if status != 200:
            raise HTTPError(status, _error_message(reply, raw))
        try:
            choice = reply["choices"][0]
            text = choice["message"].get("content") or ""
        except (TypeError, KeyError, IndexError, AttributeError):
            raise HTTPError(status, f"not a chat completion: {raw[:200]!r}") from None
        usage = reply.get("usage") or {}
        return Reply(
            text=str(text),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            finish_reason=choice.get("finish_reason"),
            tool_calls=choice["message"].get("tool_calls") or None,
        )

    def _retryable(self, exc: BaseException) -> bool:
        import aiohttp

        if isinstance(exc, HTTPError):
            return exc.status_code == 429 or exc.status_code >= 500
        return self._unreachable(exc) or isinstance(exc, aiohttp.ClientPayloadError)

    def _unreachable(self, exc: BaseException) -> bool:
        import aiohttp

        return isinstance(exc, (asyncio.TimeoutError, aiohttp.ClientConnectionError))


def _json_or_none(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def _error_message(data: Any, raw: bytes) -> str:
    """The server's error message (OpenAI's ``{"error": {"message": ...}}``), else the start of the body."""
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(error, str) and error:
        return error
    return raw[:200].decode("utf-8", "replace") or "empty body"
