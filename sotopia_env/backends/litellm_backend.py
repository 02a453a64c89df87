"""A backend on litellm: any provider, or any OpenAI-compatible server (vLLM, llama.cpp, Ollama) via ``api_base``.

litellm is imported lazily (it takes seconds), with its remote model-cost-map fetch turned off, so the only
network traffic is the completion calls themselves. Retries are ours (litellm's and the OpenAI SDK's are off):
429, timeouts, connection errors and 5xx are retried with exponential backoff and jitter; other errors fail
at once. A failed request becomes ``Completion(text="", error=...)``; ``generate`` never raises for one.
The api key is held in a private attribute only: never logged, never put in a ``Completion`` or a repr.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import time
import weakref
from typing import Any

from sotopia_env.backends.base import ChatRequest, Completion

# Providers that speak the OpenAI protocol at an ``api_base`` and accept ``response_format`` json_schema.
_OPENAI_COMPATIBLE = {"openai", "hosted_vllm"}
_MAX_BACKOFF_S = 30.0

# Semaphores bind to the event loop they are first used on, so there is one set per running loop.
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, str | None], asyncio.Semaphore]]
_semaphores = weakref.WeakKeyDictionary()


def import_litellm() -> Any:
    """Import litellm quietly and offline (no cost-map download, no telemetry, no debug banners)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.set_verbose = False
    if hasattr(litellm, "telemetry"):
        litellm.telemetry = False
    return litellm


def _semaphore(key: tuple[str, str | None], limit: int) -> asyncio.Semaphore:
    per_loop = _semaphores.setdefault(asyncio.get_running_loop(), {})
    if key not in per_loop:
        per_loop[key] = asyncio.Semaphore(limit)
    return per_loop[key]


_HOSTED_UNSUPPORTED = frozenset({"maxLength", "minLength", "minimum", "maximum"})


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


class LiteLLMBackend:
    """Chat completions through ``litellm.acompletion``; see the module docstring."""

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        api_key: str | None = None,
        *,
        structured_output: bool | None = None,
        max_retries: int = 4,
        timeout_s: float = 60.0,
        backoff_base_s: float = 0.5,
        max_concurrency: int = 64,
    ) -> None:
        litellm = import_litellm()
        self._litellm = litellm
        self.model = model
        self.api_base = api_base
        prefix = model.split("/", 1)[0]
        if api_base is not None and ("/" not in model or prefix not in litellm.provider_list):
            self.litellm_model = f"openai/{model}"
        else:
            self.litellm_model = model
        provider = self.litellm_model.split("/", 1)[0]
        if api_key is None and api_base is not None:  # without api_base, litellm reads the provider's env var
            api_key = os.environ.get("SOTOPIA_API_KEY")
            if provider in _OPENAI_COMPATIBLE:
                api_key = api_key or os.environ.get("OPENAI_API_KEY") or "sk-none"
        self._api_key = api_key  # passed to litellm only; never in a repr, a log or a Completion
        if structured_output is None:
            structured_output = (api_base is not None and provider in _OPENAI_COMPATIBLE) or bool(
                litellm.supports_response_schema(model=self.litellm_model)
            )
        self.structured_output = structured_output
        self.max_retries = max_retries
        self.timeout_s = timeout_s
        self.backoff_base_s = backoff_base_s
        self.max_concurrency = max_concurrency

    def __repr__(self) -> str:
        return f"LiteLLMBackend(model={self.model!r}, api_base={self.api_base!r})"

    async def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    def _kwargs(self, request: ChatRequest) -> dict[str, Any]:
        messages = [dict(m) for m in request.messages]
        kwargs: dict[str, Any] = {}
        if request.json_schema is not None:
            if self.structured_output:
                kwargs["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "action", "schema": self._schema(request.json_schema), "strict": True},
                }
            else:
                last = next((m for m in reversed(messages) if m.get("role") in ("user", "system")), None)
                if last is None:
                    messages.append({"role": "user", "content": schema_instruction(request.json_schema).lstrip()})
                else:
                    last["content"] = str(last.get("content") or "") + schema_instruction(request.json_schema)
        if request.seed is not None:
            kwargs["seed"] = request.seed
        return {
            "model": self.litellm_model,
            "messages": messages,
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_tokens": request.max_new_tokens,
            "api_base": self.api_base,
            "api_key": self._api_key,
            "timeout": self.timeout_s,
            "num_retries": 0,
            "max_retries": 0,
            "drop_params": True,
            **kwargs,
        }

    def _schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        """Hosted providers' strict mode rejects length and range keywords: drop them there (we validate anyway).
        Servers at an ``api_base`` (vLLM, llama.cpp) get the schema as is."""
        return schema if self.api_base is not None else without_keywords(schema, _HOSTED_UNSUPPORTED)

    def _retryable(self, exc: BaseException) -> bool:
        import httpx

        litellm = self._litellm
        if isinstance(exc, (litellm.RateLimitError, litellm.Timeout, litellm.APIConnectionError)):
            return True
        if isinstance(exc, (asyncio.TimeoutError, httpx.TimeoutException, httpx.TransportError)):
            return True
        status = getattr(exc, "status_code", None)
        return isinstance(status, int) and status >= 500

    def _describe(self, exc: BaseException, attempts: int) -> str:
        status = getattr(exc, "status_code", None)
        lines = str(exc).strip().splitlines()
        # litellm prefixes "litellm.AuthenticationError: AuthenticationError: "; the class name is given once below
        message = re.sub(r"^(?:(?:litellm\.)?\w+:\s*)+", "", lines[0])[:300] if lines else ""
        if self._api_key:
            message = message.replace(self._api_key, "***")
        where = f"HTTP {status} " if isinstance(status, int) else ""
        tries = f" after {attempts} attempts" if attempts > 1 else ""
        return f"{self.model}: {where}{type(exc).__name__}{tries}: {message}".strip().rstrip(":")

    async def _one(self, request: ChatRequest) -> Completion:
        if request.regex is not None:
            return Completion(text="", error=f"{self.model}: regex-constrained decoding needs the local backend")
        kwargs = self._kwargs(request)
        semaphore = _semaphore((self.litellm_model, self.api_base), self.max_concurrency)
        attempt = 0
        while True:
            attempt += 1
            try:
                async with semaphore:
                    start = time.perf_counter()
                    response = await asyncio.wait_for(self._litellm.acompletion(**kwargs), timeout=self.timeout_s + 5.0)
                latency = time.perf_counter() - start
                break
            except Exception as exc:  # every failure becomes a Completion.error (cancellation is not an Exception)
                if attempt > self.max_retries or not self._retryable(exc):
                    return Completion(text="", error=self._describe(exc, attempt), meta={"attempts": attempt})
                delay = min(_MAX_BACKOFF_S, self.backoff_base_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5)
                await asyncio.sleep(delay)
        return self._completion(request, response, latency, attempt)

    def _completion(self, request: ChatRequest, response: Any, latency: float, attempts: int) -> Completion:
        choice = response.choices[0]
        text = getattr(choice.message, "content", None) or ""
        meta: dict[str, Any] = {"attempts": attempts, "finish_reason": getattr(choice, "finish_reason", None)}
        if request.json_schema is not None:
            repaired = repair_json_object(text)
            if repaired is not None and repaired != text:
                text = repaired
                meta["repaired"] = True
        usage = getattr(response, "usage", None)
        return Completion(
            text=text,
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            latency_s=latency,
            meta=meta,
        )
