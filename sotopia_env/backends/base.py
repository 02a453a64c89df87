"""The interface every LLM backend shares, and ``prompt_text`` (chat messages as the text a model continues)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel


@dataclass
class ChatRequest:
    """One chat completion to make. ``json_schema`` asks for (and, where possible, forces) JSON."""

    messages: list[dict[str, str]]
    json_schema: dict[str, Any] | None = None
    regex: str | None = None  # constrain the whole reply to a regular expression (local backend only)
    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 256
    seed: int | None = None
    repetition_penalty: float = 1.0  # > 1 discourages tokens already generated in this reply (local backend only)
    # Texts the reply must not copy a run of tokens from, nor open its argument with their first two words
    # (local backend only; see backends/no_copy.py).
    avoid_copying: tuple[str, ...] = ()
    # Words the reply is nudged toward: the tokens that start them gain ``favour_bias`` logits (local backend
    # only; see backends/topic_bias.py).
    favour_words: tuple[str, ...] = ()
    favour_bias: float = 0.0
    # Record what was sampled (local backend only; other backends ignore it): ``meta`` gets ``prompt_ids``,
    # ``token_ids``, ``logprobs`` and ``sampler_logprobs`` (see backends/local.py).
    logprobs: bool = False
    # The tools the model may call (JSON schemas, ``sotopia_env.tool_calls.tool_schemas``): rendered by the local
    # backend's chat template, sent as ``tools`` to a server, whose parsed calls come back in ``meta["tool_calls"]``.
    tools: list[dict[str, Any]] | None = None
    # With ``tools``: the JSON schema one tool call (``{"name": ..., "arguments": ...}``) must follow
    # (``sotopia_env.tool_calls.tool_call_schema``). The local backend constrains the whole reply to one such call,
    # written as its chat template writes a call (``tool_wire.call_format``); other backends ignore it.
    call_schema: dict[str, Any] | None = None


def prompt_text(
    messages: list[dict[str, Any]], tokenizer: Any = None, tools: list[dict[str, Any]] | None = None
) -> str:
    """The messages as the one string a model continues: ``tokenizer``'s chat template with the generation
    prompt (and ``tools``, where given) when it has one, else a plain ``role: content`` line per message, then
    ``assistant: ``."""
    if getattr(tokenizer, "chat_template", None):
        extra = {"tools": tools} if tools else {}  # only where given: a template need not take ``tools`` at all
        return str(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **extra))
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "


@dataclass
class Completion:
    """A backend's answer. ``error`` is set (and ``text`` empty) when the call failed for good; ``failure`` then
    says whether the model service itself failed (one of ``SERVICE_FAILURES``), which no retry of the agent or
    the judge can mend: the episode is ``failed``, never rated (``raise_service_failure``)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_s: float = 0.0
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def describe(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return f"{type(exc).__name__}: {lines[0].strip()}" if lines else type(exc).__name__


class BackendError(RuntimeError):
    """A backend could not produce a completion (after its retries)."""


# How a model service can fail, as ``Completion.failure`` and ``ServiceFailure.kind`` name it: a key refused or
# missing; a model the server does not serve; nothing answering (refused, timed out); 5xx or 429 after every
# retry; a request the server rejected (4xx); a request this backend cannot make (regex decoding on a server).
SERVICE_FAILURES = ("auth", "model_not_found", "unreachable", "server_error", "rate_limited", "rejected", "unsupported")


class ServiceFailure(BackendError):
    """The model service failed, not the model: the model never answered. An agent or judge that meets one
    raises it instead of retrying; ``episodes.runner`` stores the episode as ``failed`` (never rated), and
    ``--rerun-failed`` plays it again. ``kind`` is one of ``SERVICE_FAILURES``."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


def raise_service_failure(completion: Completion) -> None:
    """Raise ``ServiceFailure`` where ``completion`` failed on the service (``Completion.failure``)."""
    if completion.failure is not None:
        raise ServiceFailure(completion.error or completion.failure, completion.failure)


@runtime_checkable
class Backend(Protocol):
    """Anything that turns chat requests into completions, one per request, in order."""

    model: str

    async def generate(self, requests: list[ChatRequest]) -> list[Completion]: ...


async def complete(backend: Backend, request: ChatRequest) -> Completion:
    """One request; raises BackendError when it failed."""
    (out,) = await backend.generate([request])
    if out.error is not None:
        raise BackendError(f"{backend.model}: {out.error}")
    return out


@dataclass
class GenerationSettings:
    """Per-agent sampling settings, applied to every request an agent makes."""

    temperature: float = 0.7
    top_p: float = 1.0
    max_new_tokens: int = 200
    seed: int | None = None
    repetition_penalty: float = 1.0
    # For agents (``LLMAgent``): the local backend may not copy runs of tokens from earlier turns, and a reply
    # that still repeats an earlier turn word for word is retried like a malformed one (kept if every retry
    # repeats too); retries of greedy settings sample at ``retry_temperature``.
    avoid_repeats: bool = False
    retry_temperature: float = 0.7
    # For agents: the local backend nudges a reply toward its seat's topic words by this many logits (0: off).
    topic_bias: float = 0.0

    def for_retry(self) -> GenerationSettings:
        """The settings of a retry: the same, except that greedy decoding (which would repeat itself) samples."""
        return self if self.temperature > 0 else replace(self, temperature=self.retry_temperature)

    def request(
        self,
        messages: list[dict[str, str]],
        json_schema: dict[str, Any] | None = None,
        seed_offset: int = 0,
        avoid_copying: tuple[str, ...] = (),
        favour_words: tuple[str, ...] = (),
        tools: list[dict[str, Any]] | None = None,
        call_schema: dict[str, Any] | None = None,
    ) -> ChatRequest:
        """A request with these settings. ``seed_offset`` varies the seed per call (e.g. per turn), so a
        seeded run is reproducible without every call sampling the same noise."""
        return ChatRequest(
            messages=messages,
            json_schema=json_schema,
            temperature=self.temperature,
            top_p=self.top_p,
            max_new_tokens=self.max_new_tokens,
            seed=None if self.seed is None else self.seed + seed_offset,
            repetition_penalty=self.repetition_penalty,
            avoid_copying=avoid_copying,
            favour_words=favour_words if self.topic_bias else (),
            favour_bias=self.topic_bias,
            tools=tools,
            call_schema=call_schema,
        )


class Usage(BaseModel):
    """What LLM calls cost: the one shape from a backend's completions to an agent, a rating and the stored log."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_seconds: float = 0.0
    errors: int = 0

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.llm_seconds += other.llm_seconds
        self.errors += other.errors

    def record(self, completion: Completion) -> None:
        self.calls += 1
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        self.llm_seconds += completion.latency_s
