"""What every backend that calls a chat server shares: the JSON schema's way to the server, JSON repair,
bounded retries with backoff, a concurrency limit per model, several servers, and one-line errors.

A subclass says how one call is sent to one server (``_send``) and which failures are worth a retry
(``_retryable``). 429s, timeouts, connection errors and 5xx are retried with exponential backoff and jitter;
other errors fail at once, and so does a key refused or missing, or a model the server does not serve, whatever
status it comes with (litellm reports a missing key as a 500). A failed request becomes ``Completion(text="",
error=..., failure=KIND)``, ``KIND`` naming how the service failed (``failure_kind``; ``base.SERVICE_FAILURES``);
``generate`` never raises for one. ``probe`` is one cheap call to one server, for a preflight. The api key is
held in a private attribute only: never logged, never put in a ``Completion`` or a repr.

An ``api_base`` naming several servers (``endpoints.ModelServers``) spreads calls over them (``endpoints.EndpointPool``:
fewest outstanding first, failing servers rested). A call that failed on one server is retried on another at
once; the backoff applies when no other server is up.

The calls in flight per model are capped by ``max_concurrency`` (64), unless a batch says otherwise:
``call_limit(n)`` sets the cap for everything run inside it (``episodes.runner.run_batch`` sets it to what
its episodes in flight can call at once, or to ``--max-calls``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import time
import weakref
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from sotopia_env.backends.base import ChatRequest, Completion, ServiceFailure
from sotopia_env.backends.endpoints import ApiBase, Endpoint, EndpointPool, ModelServers

# Providers that speak the OpenAI protocol at an ``api_base`` and accept ``response_format`` json_schema.
OPENAI_COMPATIBLE = frozenset({"openai", "hosted_vllm"})
HOSTED_UNSUPPORTED = frozenset({"maxLength", "minLength", "minimum", "maximum", "pattern"})
_MAX_BACKOFF_S = 30.0
# Every remote backend's defaults, declared once (the subclasses' constructors take them from here).
DEFAULT_MAX_RETRIES = 4  # retries of a retryable failure, after the first try
DEFAULT_TIMEOUT_S = 60.0  # seconds one call may take
DEFAULT_BACKOFF_BASE_S = 0.5  # the first wait before a retry; it doubles (with jitter) up to _MAX_BACKOFF_S
DEFAULT_MAX_CONCURRENCY = 64  # calls in flight per model, outside a ``call_limit``
# Failures no retry mends: a key refused or missing, a model the server does not serve.
FINAL_FAILURES = frozenset({"auth", "model_not_found"})
_AUTH_TEXT = re.compile(
    r"missing credentials|api[ _-]?key|unauthori[sz]ed|authenticat|permission denied|forbidden|access denied", re.I
)
_NOT_FOUND_TEXT = re.compile(
    r"model\b.{0,160}\b(?:not found|does not exist|not exist)|model_not_found|no such model", re.I
)

# Semaphores bind to the event loop they are first used on, so there is one set per running loop.
_SemaphoreKey = tuple[str, ModelServers | None, int]
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[_SemaphoreKey, asyncio.Semaphore]]
_semaphores = weakref.WeakKeyDictionary()

# The calls in flight per model inside a batch (``call_limit``); None: each backend's ``max_concurrency``.
_CALL_LIMIT: ContextVar[int | None] = ContextVar("sotopia_env_call_limit", default=None)


@contextlib.contextmanager
def call_limit(limit: int) -> Iterator[None]:
    """Within this block (and the tasks started in it), each remote model takes up to ``limit`` calls at once."""
    token = _CALL_LIMIT.set(max(1, limit))
    try:
        yield
    finally:
        _CALL_LIMIT.reset(token)


def per_loop_semaphore(key: tuple[str, ModelServers | None], limit: int) -> asyncio.Semaphore:
    per_loop = _semaphores.setdefault(asyncio.get_running_loop(), {})
    full_key = (*key, limit)
    if full_key not in per_loop:
        per_loop[full_key] = asyncio.Semaphore(limit)
    return per_loop[full_key]


def server_api_key(api_key: str | None, openai_compatible: bool) -> str | None:
    """The key for a server at an ``api_base``: the given one, else $SOTOPIA_API_KEY, else (OpenAI protocol)
    $OPENAI_API_KEY or a dummy, since local servers (vLLM, llama.cpp) ignore it but clients must send one."""
    if api_key is not None:
        return api_key
    api_key = os.environ.get("SOTOPIA_API_KEY")
    if openai_compatible:
        api_key = api_key or os.environ.get("OPENAI_API_KEY") or "sk-none"
    return api_key


def without_keywords(schema: Any, drop: frozenset[str]) -> Any:
    """A copy of a JSON schema without the ``drop`` keywords at any depth; property names are never dropped."""
    if isinstance(schema, list):
        return [without_keywords(v, drop) for v in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in drop:
            continue
        if key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: without_keywords(sub, drop) for name, sub in value.items()}
        else:
            out[key] = without_keywords(value, drop)
    return out


def hosted_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """What hosted providers' strict mode accepts: no ``HOSTED_UNSUPPORTED`` keywords, and a root ``anyOf`` of
    object schemas (the action schema's per-kind branches) merged into one object whose enums are the union."""
    schema = without_keywords(schema, HOSTED_UNSUPPORTED)
    branches = schema.get("anyOf")
    if not isinstance(branches, list) or not all(isinstance(b, dict) and "properties" in b for b in branches):
        return schema
    merged = {**branches[0], "properties": dict(branches[0]["properties"])}
    kinds = [v for b in branches for v in b["properties"].get("action_type", {}).get("enum", [])]
    if kinds:  # the other properties are the first branch's (a game's argument choices are checked by the env)
        merged["properties"]["action_type"] = {
            **merged["properties"]["action_type"],
            "enum": list(dict.fromkeys(kinds)),
        }
    return merged


def schema_instruction(schema: dict[str, Any]) -> str:
    """The instruction appended to the prompt when the server cannot force the schema."""
    return (
        "\n\nAnswer with a single JSON object (no prose, no code fences) that follows this JSON schema:\n"
        + json.dumps(schema)
    )


def repair_json_object(text: str) -> str | None:
    """The reply as JSON text if it already is JSON or can be repaired into a non-empty JSON object, else None."""
    try:
        json.loads(text)
        return text
    except ValueError:
        pass
    import json_repair

    repaired = json_repair.repair_json(text, return_objects=False)
    try:
        value = json.loads(repaired) if isinstance(repaired, str) else None
    except ValueError:
        return None
    return repaired if isinstance(value, dict) and value else None


@dataclass
class Reply:
    """What a server answered to one call."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    tool_calls: list[dict[str, Any]] | None = None  # the server's parsed tool calls (a request with ``tools``)


class RemoteBackend:
    """A chat server behind retries, a concurrency limit and JSON repair; subclasses implement ``_send``."""

    def __init__(
        self,
        model: str,
        api_base: ApiBase,
        api_key: str | None,
        *,
        structured_output: bool,
        hosted: bool,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        backoff_base_s: float = DEFAULT_BACKOFF_BASE_S,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        self.model = model
        self.api_base = ModelServers.parse(api_base)  # None: the provider's own endpoint
        self._api_key = api_key  # sent to the server only; never in a repr, a log or a Completion
        self.structured_output = structured_output
        self._hosted = hosted
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.backoff_base_s = backoff_base_s
        self.max_concurrency = max_concurrency
        self.endpoints = EndpointPool(self.api_base.urls if self.api_base else [])

    def __repr__(self) -> str:
        servers = str(self.api_base) if self.api_base else None
        return f"{type(self).__name__}(model={self.model!r}, api_base={servers!r})"

    async def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _send(
        self, request: ChatRequest, messages: list[dict[str, Any]], extra: dict[str, Any], api_base: str | None
    ) -> Reply:
        """One call to the server at ``api_base`` (one of this backend's servers; None: the provider's own)."""
        raise NotImplementedError

    def _retryable(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def failure_kind(self, exc: BaseException) -> str:
        """How the service failed in ``exc`` (one of ``base.SERVICE_FAILURES``), by status and message."""
        status = getattr(exc, "status_code", None)
        message = str(exc)
        if status in (401, 403) or _AUTH_TEXT.search(message):
            return "auth"
        if status == 404 or _NOT_FOUND_TEXT.search(message):
            return "model_not_found"
        if self._unreachable(exc):
            return "unreachable"
        if status == 429:
            return "rate_limited"
        if isinstance(status, int) and 400 <= status < 500:
            return "rejected"
        return "server_error"

    def _unreachable(self, exc: BaseException) -> bool:
        """Whether ``exc`` says nothing answered: a connection refused or dropped, a timeout."""
        raise NotImplementedError

    def _retry(self, exc: BaseException) -> bool:
        """Whether ``exc`` is worth another attempt: the subclass says so and the failure is not final."""
        return self._retryable(exc) and self.failure_kind(exc) not in FINAL_FAILURES

    def _server_failed(self, exc: BaseException) -> bool:
        """Whether ``exc`` blames the server (refused, timed out, 5xx), not the request or a rate limit."""
        return self._retryable(exc) and getattr(exc, "status_code", None) != 429

    def _semaphore_key(self) -> tuple[str, ModelServers | None]:
        return (self.model, self.api_base)

    def _prepared(self, request: ChatRequest) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The messages to send (the schema appended when the server cannot force it) and the extra body fields."""
        messages = [dict(m) for m in request.messages]
        extra: dict[str, Any] = {}
        if request.tools:  # a ``tools`` conversation: OpenAI's wire format, and the tools the model may call
            from sotopia_env.backends.tool_wire import openai_messages

            messages = openai_messages(messages)
            extra["tools"] = request.tools
        if request.json_schema is not None:
            if self.structured_output:
                # Hosted providers' strict mode rejects length and range keywords: drop them there (we validate
                # anyway). Servers at an ``api_base`` (vLLM, llama.cpp) get the schema as is.
                schema = hosted_schema(request.json_schema) if self._hosted else request.json_schema
                extra["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "action", "schema": schema, "strict": True},
                }
            else:
                last = next((m for m in reversed(messages) if m.get("role") in ("user", "system")), None)
                if last is None:
                    messages.append({"role": "user", "content": schema_instruction(request.json_schema).lstrip()})
                else:
                    last["content"] = str(last.get("content") or "") + schema_instruction(request.json_schema)
        if request.seed is not None:
            extra["seed"] = request.seed
        return messages, extra

    async def _one(self, request: ChatRequest) -> Completion:
        if request.regex is not None:
            error = f"{self.model}: regex-constrained decoding needs the local backend"
            return Completion(text="", error=error, failure="unsupported")
        messages, extra = self._prepared(request)
        semaphore = per_loop_semaphore(self._semaphore_key(), _CALL_LIMIT.get() or self.max_concurrency)
        attempt = 0
        failed_on: Endpoint | None = None
        while True:
            attempt += 1
            try:
                async with semaphore:
                    endpoint = self.endpoints.acquire(avoid=failed_on)
                    start = time.perf_counter()
                    try:
                        reply = await self._send(request, messages, extra, endpoint.url)
                    except BaseException as exc:
                        self.endpoints.release(endpoint, server_failed=self._server_failed(exc))
                        raise
                    self.endpoints.release(endpoint, server_failed=False)
                latency = time.perf_counter() - start
                break
            except Exception as exc:  # every failure becomes a Completion.error (cancellation is not an Exception)
                if attempt > self.max_retries or not self._retry(exc):
                    server = endpoint.url if len(self.endpoints) > 1 else None
                    error = self._describe(exc, attempt, server)
                    failure = self.failure_kind(exc)
                    return Completion(text="", error=error, meta={"attempts": attempt}, failure=failure)
                failed_on = endpoint
                if self._server_failed(exc) and self.endpoints.available(avoid=endpoint):
                    continue  # another server is up: retry there at once
                delay = min(_MAX_BACKOFF_S, self.backoff_base_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
                await asyncio.sleep(delay)
        return self._completion(request, reply, latency, attempt)

    async def probe(self, url: str | None, timeout_s: float) -> ServiceFailure | None:
        """One cheap call (one token, no retry) to the server at ``url`` (None: the provider's own): the failure
        that a run would meet there, or None when the service answers. A rate limit (429) or a request the server
        rejects (another 4xx: a one-token call is unusual) still proves the key, the server and the model, and
        passes; a timeout after ``timeout_s`` is ``unreachable``."""
        request = ChatRequest(messages=[{"role": "user", "content": "Say OK."}], temperature=0.0, max_new_tokens=1)
        messages, extra = self._prepared(request)
        try:
            await asyncio.wait_for(self._send(request, messages, extra, url), timeout=timeout_s)
        except asyncio.TimeoutError as exc:
            return ServiceFailure(
                f"{self.model}: no answer within {timeout_s:g} s ({type(exc).__name__})", "unreachable"
            )
        except Exception as exc:
            kind = self.failure_kind(exc)
            if kind not in ("rate_limited", "rejected"):
                return ServiceFailure(self._describe(exc, 1, url), kind)
        return None

    def _describe(self, exc: BaseException, attempts: int, server: str | None = None) -> str:
        status = getattr(exc, "status_code", None)
        lines = str(exc).strip().splitlines()
        # litellm prefixes "litellm.AuthenticationError: AuthenticationError: "; the class name is given once below
        message = re.sub(r"^(?:(?:litellm\.)?\w+:\s*)+", "", lines[0])[:300] if lines else ""
        if self._api_key:
            message = message.replace(self._api_key, "***")
        where = f"HTTP {status} " if isinstance(status, int) else ""
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        model = f"{self.model} at {server}" if server else self.model
        return f"{model}: {where}{type(exc).__name__}{tries}: {message}".strip().rstrip(":")

    def _completion(self, request: ChatRequest, reply: Reply, latency: float, attempts: int) -> Completion:
        text = reply.text
        meta: dict[str, Any] = {"attempts": attempts, "finish_reason": reply.finish_reason}
        if reply.tool_calls:
            meta["tool_calls"] = reply.tool_calls
        if request.json_schema is not None:
            repaired = repair_json_object(text)
            if repaired is not None and repaired != text:
                text = repaired
                meta["repaired"] = True
        return Completion(
            text=text,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
            latency_s=latency,
            meta=meta,
        )
