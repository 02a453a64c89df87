"""Turn a model spec string into a backend.

Specs (read once, by ``sotopia_env.specs.ModelSpec.parse``; this module reads the parsed fields):

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

``prompt_for_model`` says which prompt (``sotopia_env.prompt``) a spec's agents are prompted with, and the
training data for it is built with.
"""

from __future__ import annotations

from typing import Any

from sotopia_env.backends.base import Backend
from sotopia_env.backends.endpoints import ApiBase, ModelServers, pinned
from sotopia_env.specs import ModelSpec

_shared: dict[tuple, Backend] = {}


def uses_openai_http(spec: ModelSpec | str, api_base: ApiBase) -> bool:
    """Whether ``spec`` at ``api_base`` goes to the lean OpenAI-protocol client rather than litellm (a model run
    here goes to neither: ``ModelSpec.route``)."""
    spec = ModelSpec.parse(spec)
    return not spec.is_local and spec.route(ModelServers.parse(api_base)) == "openai_http"


def is_local_spec(spec: ModelSpec | str) -> bool:
    """Whether ``spec``'s model runs here (``ModelSpec.is_local``)."""
    return ModelSpec.parse(spec).is_local


def prompt_for_model(spec: ModelSpec | str) -> str:
    """The prompt ``spec``'s model is prompted with: a trained model directory's own (what it was trained on),
    ``chat`` for any other model run here (the embedded small models, a ``local:`` hub id, a model directory),
    SOTOPIA's for a model behind an API."""
    from sotopia_env.model_ref import model_prompt

    spec = ModelSpec.parse(spec)
    trained = model_prompt(spec.name) if spec.is_local else None
    if trained is not None:
        return trained  # an agent built with it checks the name (``sotopia_env.prompt.prompt_function``)
    return "chat" if spec.is_local else "sotopia"


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


def resolve_backend(
    spec: ModelSpec | str, api_base: ApiBase = None, api_key: str | None = None, **options: Any
) -> Backend:
    """The shared backend for ``spec`` (a ``ModelSpec``, or a string parsed here once); ``api_base`` may name
    several servers (``endpoints.ModelServers``), of which an ``endpoint_share`` keeps its own."""
    spec = ModelSpec.parse(spec)
    api_base = pinned(ModelServers.parse(api_base))
    key = (spec.text, api_base, tuple(sorted(options.items())))
    if key in _shared:
        return _shared[key]
    route = spec.route(api_base)
    if route == "local":
        from sotopia_env.backends.local import LocalBackend

        backend: Backend = LocalBackend.from_spec(spec.name, **options)
    elif route == "openai_http":
        from sotopia_env.backends.openai_http import OpenAIHTTPBackend

        backend = OpenAIHTTPBackend(spec, api_base=api_base, api_key=api_key, **options)
    else:
        from sotopia_env.backends.litellm_backend import LiteLLMBackend

        backend = LiteLLMBackend(spec, api_base=api_base, api_key=api_key, **options)
    _shared[key] = backend
    return backend
