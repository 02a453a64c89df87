"""Turn a model spec string into a backend.

Specs:

- an alias of an embedded model (``smollm2-135m``): the local backend, weights from the cache;
- ``local:<hub id or path>``: the local transformers backend;
- a directory holding a trained model reference (``sotopia_model.json``) or a
  transformers model: the local backend;
- ``scripted``: not resolvable here (tests build ``ScriptedBackend`` directly);
- with an ``api_base`` (``endpoints.ModelServers``: one URL or several): an OpenAI-compatible server (vLLM, llama.cpp,
  SGLang), served by the lean aiohttp client (``openai_http.OpenAIHTTPBackend``), unless the spec names a
  litellm provider with a protocol of its own (``ollama/llama3``, ``anthropic/...``) or starts with
  ``litellm:`` (forces litellm);
- anything else: a litellm model string (``gpt-4o-mini``, ``anthropic/claude-...``, ``ollama/llama3``, ...).

Backends are shared per (spec, api_base), so two agents on the same local
model share one copy of the weights and one batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sotopia_env.backends.base import Backend
from sotopia_env.backends.endpoints import ApiBase, ModelServers, pinned

_shared: dict[tuple, Backend] = {}

# litellm providers that speak a protocol of their own at an api_base; any other prefix at an api_base
# (none, ``openai/``, ``hosted_vllm/``, a hub organisation like ``Qwen/``) is an OpenAI-compatible server.
LITELLM_NATIVE_PROVIDERS = frozenset(
    {
        "anthropic", "azure", "azure_ai", "bedrock", "cloudflare", "cohere", "cohere_chat", "databricks",
        "gemini", "groq", "huggingface", "mistral", "ollama", "ollama_chat", "palm", "predibase", "replicate",
        "sagemaker", "text-completion-openai", "together_ai", "triton", "vertex_ai", "watsonx",
    }
)  # fmt: skip


def uses_openai_http(spec: str, api_base: ApiBase) -> bool:
    """Whether ``spec`` at ``api_base`` goes to the lean OpenAI-protocol client rather than litellm."""
    if api_base is None or spec.startswith("litellm:"):
        return False
    prefix, slash, _ = spec.partition("/")
    return not slash or prefix not in LITELLM_NATIVE_PROVIDERS


def is_local_spec(spec: str) -> bool:
    from sotopia_env.embedded_models import EMBEDDED_MODELS

    return spec in EMBEDDED_MODELS or spec.startswith("local:") or Path(spec).is_dir()


def release_backends(specs: set[str] | None = None, keep: object = None) -> None:
    """Forget (and close, where they can be closed) the shared backends of ``specs`` (all when None),
    except ``keep``; a pipeline that loads one model per stage frees each one's weights this way."""
    for key in [k for k in _shared if specs is None or k[0] in specs]:
        backend = _shared.pop(key)
        if backend is keep:
            _shared[key] = backend
            continue
        close = getattr(backend, "close", None)
        if callable(close):
            close()


def resolve_backend(spec: str, api_base: ApiBase = None, api_key: str | None = None, **options: Any) -> Backend:
    """The shared backend for ``spec``; ``api_base`` may name several servers (``endpoints.ModelServers``), of
    which an ``endpoint_share`` keeps its own."""
    api_base = pinned(ModelServers.parse(api_base))
    key = (spec, api_base, tuple(sorted(options.items())))
    if key in _shared:
        return _shared[key]
    if is_local_spec(spec):
        from sotopia_env.backends.local import LocalBackend

        backend: Backend = LocalBackend.from_spec(spec.removeprefix("local:"), **options)
    elif uses_openai_http(spec, api_base):
        from sotopia_env.backends.openai_http import OpenAIHTTPBackend

        backend = OpenAIHTTPBackend(spec, api_base=api_base, api_key=api_key, **options)
    else:
        from sotopia_env.backends.litellm_backend import LiteLLMBackend

        backend = LiteLLMBackend(spec.removeprefix("litellm:"), api_base=api_base, api_key=api_key, **options)
    _shared[key] = backend
    return backend
