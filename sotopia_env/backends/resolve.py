"""Turn a model spec string into a backend.

Specs:

- an alias of an embedded model (``smollm2-135m``): the local backend, weights from the cache;
- ``local:<hub id or path>``: the local transformers backend;
- a directory holding a trained model reference (``sotopia_model.json``) or a
  transformers model: the local backend;
- ``scripted``: not resolvable here (tests build ``ScriptedBackend`` directly);
- anything else: a litellm model string (``gpt-4o-mini``, ``openai/<name>`` with
  ``api_base`` for an OpenAI-compatible server, ``ollama/llama3``, ...).

Backends are shared per (spec, api_base), so two agents on the same local
model share one copy of the weights and one batch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sotopia_env.backends.base import Backend

_shared: dict[tuple, Backend] = {}


def is_local_spec(spec: str) -> bool:
    from sotopia_env.models import EMBEDDED_MODELS

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


def resolve_backend(spec: str, api_base: str | None = None, api_key: str | None = None, **options: Any) -> Backend:
    key = (spec, api_base, tuple(sorted(options.items())))
    if key in _shared:
        return _shared[key]
    if is_local_spec(spec):
        from sotopia_env.backends.local import LocalBackend

        backend: Backend = LocalBackend.from_spec(spec.removeprefix("local:"), **options)
    else:
        from sotopia_env.backends.litellm_backend import LiteLLMBackend

        backend = LiteLLMBackend(spec, api_base=api_base, api_key=api_key, **options)
    _shared[key] = backend
    return backend
