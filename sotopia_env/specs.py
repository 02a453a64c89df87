"""Typed specs: a model or an evaluator named by a string is parsed here, once, where the string enters.

The CLI's options, an HTTP body and a YAML config give specs as strings; ``ModelSpec.parse`` and
``EvaluatorSpec.parse`` are the only code that reads such a string (an agent spec, which may name a model, is
parsed by ``sotopia_env.agents.specs.AgentSpec.parse``). Everything below the edge takes the typed value, or a
string it parses at its own entry (``resolve_backend``, ``make_evaluator``, ``load_agent``), and reads fields:
never a prefix of the string again.

A model spec is one of (``ModelSpec.source``):

- ``embedded``: an embedded model's alias (``smollm2-135m``, ``DEFAULT_MODEL``): the local backend;
- ``local``: ``local:<hub id or path>``: the local transformers backend on ``name`` (the part after ``local:``);
- ``directory``: an existing folder (a trained model with ``sotopia_model.json``, or a transformers model): the
  local backend;
- ``litellm``: ``litellm:<model>``: litellm, even at an ``api_base`` (``name`` is the part after ``litellm:``);
- ``hosted``: anything else: a provider's model (``gpt-4o-mini``, ``anthropic/claude-...``, ``ollama/llama3``) or,
  at an ``api_base``, a model an OpenAI-compatible server serves (``Qwen/Qwen2.5-7B-Instruct``).

``provider`` is the part of ``name`` before its first ``/`` (None without one); ``route(api_base)`` says which
backend serves the spec. An evaluator spec is ``none``, a judge's registered name (``rule-based``,
``verifiable``, an entry point's), or a model spec.

This module is in the bottom layer (it imports only ``errors`` and ``embedded_models``), so the backends use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sotopia_env.errors import UserError

DEFAULT_MODEL = "smollm2-135m"  # the embedded model every default names: no key, no server
NO_EVALUATOR = "none"  # the evaluator spec of no judge: episodes stored unrated by choice
LOCAL_PREFIX = "local:"
LITELLM_PREFIX = "litellm:"
MAX_SPEC_CHARS = 2000  # longer is no spec (a pasted prompt, say): said in one line, not probed as a path

# litellm providers that speak a protocol of their own at an api_base; any other prefix at an api_base
# (none, ``openai/``, ``hosted_vllm/``, a hub organisation like ``Qwen/``) is an OpenAI-compatible server.
LITELLM_NATIVE_PROVIDERS = frozenset(
    {
        "anthropic", "azure", "azure_ai", "bedrock", "cloudflare", "cohere", "cohere_chat", "databricks",
        "gemini", "groq", "huggingface", "mistral", "ollama", "ollama_chat", "palm", "predibase", "replicate",
        "sagemaker", "text-completion-openai", "together_ai", "triton", "vertex_ai", "watsonx",
    }
)  # fmt: skip

ModelSource = Literal["embedded", "local", "directory", "litellm", "hosted"]
Route = Literal["local", "openai_http", "litellm"]
LOCAL_SOURCES = frozenset({"embedded", "local", "directory"})


class SpecError(UserError, ValueError):
    """A spec string that cannot be read; the message is one line and names the spec."""


def _text(value: object, what: str) -> str:
    """``value`` as a spec's text; a ``SpecError`` naming it for a non-string, a blank or an overlong one."""
    if not isinstance(value, str):
        raise SpecError(f"{what} {value!r}: expected a string, not {type(value).__name__}")
    if not value.strip():
        raise SpecError(f"{what} {value!r}: empty")
    if len(value) > MAX_SPEC_CHARS or "\n" in value:
        raise SpecError(f"{what} {value[:60]!r}...: not a spec (over {MAX_SPEC_CHARS} characters or several lines)")
    return value


@dataclass(frozen=True)
class ModelSpec:
    """A model spec, read once (see the module docstring). ``str()`` is the text as given, which is also how
    episodes, shared backends and reports name the model."""

    text: str
    source: ModelSource
    name: str  # what the backend loads or calls: the alias, the hub id or path, the provider's model string
    provider: str | None = None  # ``name``'s part before its first '/', for a model called through litellm

    @classmethod
    def parse(cls, value: ModelSpec | str) -> ModelSpec:
        """The spec ``value`` names (a ``ModelSpec`` is passed through); ``SpecError`` for one that is no spec."""
        if isinstance(value, ModelSpec):
            return value
        text = _text(value, "model spec")
        from sotopia_env.embedded_models import EMBEDDED_MODELS

        if text in EMBEDDED_MODELS:
            return cls(text, "embedded", text)
        if text.startswith(LOCAL_PREFIX):
            name = text.removeprefix(LOCAL_PREFIX)
            if not name.strip():
                raise SpecError(f"model spec {text!r}: 'local:' names no model (local:<hub id or path>)")
            return cls(text, "local", name)
        if Path(text).is_dir():
            return cls(text, "directory", text)
        source: ModelSource = "hosted"
        name = text
        if text.startswith(LITELLM_PREFIX):
            source, name = "litellm", text.removeprefix(LITELLM_PREFIX)
            if not name.strip():
                raise SpecError(f"model spec {text!r}: 'litellm:' names no model (litellm:<provider/model>)")
        provider, slash, _ = name.partition("/")
        return cls(text, source, name, provider if slash else None)

    @property
    def is_local(self) -> bool:
        """Whether the model runs here (the local transformers backend), not behind an API."""
        return self.source in LOCAL_SOURCES

    @property
    def model(self) -> str:
        """``name`` without its provider: ``gpt-4o`` of ``openai/gpt-4o``; ``name`` itself without a provider."""
        return self.name[len(self.provider) + 1 :] if self.provider else self.name

    def route(self, api_base: object = None) -> Route:
        """Which backend serves this spec: ``local`` (run here), ``openai_http`` (the lean client, for an
        OpenAI-compatible server at ``api_base``) or ``litellm`` (a provider, or ``litellm:`` forced, or a
        litellm provider with a protocol of its own at ``api_base``)."""
        if self.is_local:
            return "local"
        if api_base is None or self.source == "litellm":
            return "litellm"
        return "litellm" if self.provider in LITELLM_NATIVE_PROVIDERS else "openai_http"

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class EvaluatorSpec:
    """An evaluator spec, read once: ``key`` is the judge's name as the registry of judges keys it (``none``,
    ``rule-based``, ...); ``model`` is the spec as a model, for an ``LLMEvaluator`` when no judge has that name
    (None for ``none``)."""

    text: str
    key: str
    model: ModelSpec | None = field(default=None, compare=False)

    @classmethod
    def parse(cls, value: EvaluatorSpec | ModelSpec | str) -> EvaluatorSpec:
        """The evaluator ``value`` names (an ``EvaluatorSpec`` is passed through, a ``ModelSpec`` is a model
        judge); ``SpecError`` naming it for one that is no spec."""
        if isinstance(value, EvaluatorSpec):
            return value
        if isinstance(value, ModelSpec):
            return cls(value.text, value.text.strip().lower(), value)
        text = _text(value, "evaluator spec")
        key = text.strip().lower()
        if key == NO_EVALUATOR:
            return cls(text, key)
        try:
            model = ModelSpec.parse(text)
        except SpecError as exc:
            raise SpecError(str(exc).replace("model spec", "evaluator spec", 1)) from None
        return cls(text, key, model)

    @property
    def is_none(self) -> bool:
        """``none``: no evaluator."""
        return self.key == NO_EVALUATOR

    def __str__(self) -> str:
        return self.text
