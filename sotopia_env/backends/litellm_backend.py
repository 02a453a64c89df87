"""A backend on litellm: any provider (``gpt-4o-mini``, ``anthropic/...``, ``ollama/...``).

litellm is imported lazily (it takes seconds), with its remote model-cost-map fetch turned off, so the only
network traffic is the completion calls themselves. Retries are ours (``remote.RemoteBackend``; litellm's and
the OpenAI SDK's are off). An OpenAI-compatible server at an ``api_base`` (vLLM, llama.cpp) is usually served
by ``openai_http.OpenAIHTTPBackend`` instead, which costs far less CPU per call (see ``resolve.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
from typing import Any

from sotopia_env.backends.base import ChatRequest
from sotopia_env.backends.endpoints import ApiBase, ModelServers
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
from sotopia_env.embedded_models import EMBEDDED_MODELS, UnknownModel
from sotopia_env.errors import did_you_mean
from sotopia_env.specs import ModelSpec


def import_litellm() -> Any:
    """Import litellm quietly and offline (no cost-map download, no telemetry, no debug banners)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.suppress_debug_info = True
    litellm.set_verbose = False
    if hasattr(litellm, "telemetry"):
        litellm.telemetry = False
    return litellm


class LiteLLMBackend(RemoteBackend):
    """Chat completions through ``litellm.acompletion``; see ``remote.RemoteBackend`` for retries and errors."""

    def __init__(
        self,
        model: ModelSpec | str,
        api_base: ApiBase = None,
        api_key: str | None = None,
        *,
        structured_output: bool | None = None,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        backoff_base_s: float = DEFAULT_BACKOFF_BASE_S,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        litellm = import_litellm()
        self._litellm = litellm
        spec = ModelSpec.parse(model)  # the fields below, never the string again
        api_base = ModelServers.parse(api_base)  # parsed once here; RemoteBackend takes it as it is
        provider = spec.provider
        if api_base is not None and provider not in litellm.provider_list:  # a server's own model name
            provider, self.litellm_model = "openai", f"openai/{spec.name}"
        else:
            self.litellm_model = spec.name
        if api_base is None:
            _check_provider(litellm, spec.name)
        openai_compatible = api_base is not None and provider in OPENAI_COMPATIBLE
        if api_base is not None:  # without api_base, litellm reads the provider's env var
            api_key = server_api_key(api_key, openai_compatible)
        if structured_output is None:
            structured_output = openai_compatible or bool(litellm.supports_response_schema(model=self.litellm_model))
        super().__init__(
            spec.name,
            api_base,
            api_key,
            structured_output=structured_output,
            hosted=api_base is None,
            max_retries=max_retries,
            timeout_s=timeout_s,
            backoff_base_s=backoff_base_s,
            max_concurrency=max_concurrency,
        )

    def _semaphore_key(self) -> tuple[str, ModelServers | None]:
        return (self.litellm_model, self.api_base)

    async def _send(
        self, request: ChatRequest, messages: list[dict[str, Any]], extra: dict[str, Any], api_base: str | None
    ) -> Reply:
        call = self._litellm.acompletion(
            model=self.litellm_model,
            messages=messages,
            temperature=request.temperature,
            top_p=request.top_p,
            max_tokens=request.max_new_tokens,
            api_base=api_base,
            api_key=self._api_key,
            timeout=self.timeout_s,
            num_retries=0,
            max_retries=0,
            drop_params=True,
            **extra,
        )
        response = await asyncio.wait_for(call, timeout=self.timeout_s + 5.0)
        choice = response.choices[0]
        usage = getattr(response, "usage", None)
        return Reply(
            text=getattr(choice.message, "content", None) or "",
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            finish_reason=getattr(choice, "finish_reason", None),
            tool_calls=_tool_calls(getattr(choice.message, "tool_calls", None)),
        )

    def _retryable(self, exc: BaseException) -> bool:
        if isinstance(exc, self._litellm.RateLimitError) or self._unreachable(exc):
            return True
        status = getattr(exc, "status_code", None)
        return isinstance(status, int) and status >= 500

    def _unreachable(self, exc: BaseException) -> bool:
        import httpx

        litellm = self._litellm  # its connection errors carry a status of 500: the type says what happened
        return isinstance(
            exc, (litellm.Timeout, litellm.APIConnectionError, asyncio.TimeoutError, httpx.TransportError)
        )


def _tool_calls(calls: Any) -> list[dict[str, Any]] | None:
    """litellm's tool-call objects as plain dicts (``{"id", "type", "function": {"name", "arguments"}}``)."""
    if not calls:
        return None
    return [c.model_dump() if hasattr(c, "model_dump") else dict(c) for c in calls]


def _check_provider(litellm: Any, model: str) -> None:
    """A hosted model litellm cannot route is one line now (no call made), not an error per episode later."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # litellm prints a provider list on failure
            litellm.get_llm_provider(model=model)
    except Exception:
        hint = did_you_mean(model, EMBEDDED_MODELS, "'sotopia-env models list' lists the embedded models")
        raise UnknownModel(
            f"model {model!r}: not an embedded model, a local path or a provider's model litellm knows; "
            f"write PROVIDER/MODEL (e.g. openai/gpt-4o-mini), or give --api-base for your own server{hint}"
        ) from None
