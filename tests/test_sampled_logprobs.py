"""The local backend's record of what it sampled (``ChatRequest.logprobs``): the ids, and their log-probabilities
under the policy (raw logits over the temperature) and under the distribution each token was drawn from.

All on the tiny random llama of ``conftest.py``, through both ways the backend decodes: its continuous-batching
scheduler and ``model.generate`` (kept for models the scheduler cannot hold).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from sotopia_env.actions import action_json_schema
from sotopia_env.backends.base import ChatRequest, Completion
from sotopia_env.backends.local import LocalBackend

RECORD = {"prompt_ids", "token_ids", "logprobs", "sampler_logprobs"}
ENUM_SCHEMA = {
    "type": "object",
    "properties": {"action_type": {"type": "string", "enum": ["speak", "leave"]}},
    "required": ["action_type"],
    "additionalProperties": False,
}
PROMPTS = ["hi", "Hello, how are you today?", "speak to me about the argument, my friend, please"]


@pytest.fixture(params=[True, False], ids=["scheduler", "generate"])
def tiny(tiny_model_dir: Path, request: pytest.FixtureRequest) -> LocalBackend:
    return LocalBackend.from_spec(str(tiny_model_dir), max_batch_size=8, batch_window_s=0.02, continuous=request.param)


@pytest.fixture(params=[True, False], ids=["scheduler", "generate"])
def uncached(tiny_model_dir: Path, request: pytest.FixtureRequest) -> LocalBackend:
    """No prefix cache: a repeated batch is laid out (and computed) exactly as the first time."""
    return LocalBackend.from_spec(
        str(tiny_model_dir), max_batch_size=8, batch_window_s=0.02, prefix_cache_mb=0, continuous=request.param
    )


def ask(text: str, **kwargs: Any) -> ChatRequest:
    kwargs.setdefault("temperature", 0.7)
    kwargs.setdefault("max_new_tokens", 16)
    return ChatRequest(messages=[{"role": "user", "content": text}], **kwargs)


def run(backend: LocalBackend, requests: list[ChatRequest]) -> list[Completion]:
    """One ``generate`` call: one batch."""
    calls = backend.generate_calls
    outs = asyncio.run(backend.generate(requests))
    assert backend.generate_calls == calls + 1 and all(o.ok for o in outs), [o.error for o in outs]
    return outs


def spy_on_generate(backend: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor] | None:
    """Every tensor ``model.generate`` returns, in order: what was really sampled. None under the scheduler, whose
    record is read from the very buffer of ids it feeds the model."""
    if backend._scheduler is not None:
        return None
    outputs: list[torch.Tensor] = []
    real = backend.lm.generate

    def generate(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = real(*args, **kwargs)
        outputs.append(out.clone())
        return out

    monkeypatch.setattr(backend.lm, "generate", generate)
    return outputs


def forward_logprobs(backend: LocalBackend, prompt_ids: list[int], token_ids: list[int], temperature: float):
    """A fresh forward pass over prompt + reply, unpadded: log-softmax(logits / temperature) at the reply's ids."""
    ids = torch.tensor([prompt_ids + token_ids])
    with torch.no_grad():
        logits = backend.lm(ids).logits[0, len(prompt_ids) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(token_ids)[:, None]).squeeze(1)


def reply_ids(out: Completion, stop_ids: set[int]) -> list[int]:
    """``token_ids`` less the final stop token (when the reply stopped): what ``text`` was decoded from."""
    ids = out.meta["token_ids"]
    if out.meta["finish_reason"] == "stop":
        assert ids and ids[-1] in stop_ids
        return ids[:-1]
    assert not any(t in stop_ids for t in ids)
    return ids


def check_record(backend: LocalBackend, out: Completion, temperature: float) -> None:
    """The record's shape, its ids against ``text``, and ``logprobs`` against a fresh forward pass."""
    meta = out.meta
    assert RECORD <= set(meta)
    n = len(meta["token_ids"])
    assert n > 0 and len(meta["logprobs"]) == len(meta["sampler_logprobs"]) == n
    assert n == out.completion_tokens + (meta["finish_reason"] == "stop")
    assert len(meta["prompt_ids"]) == out.prompt_tokens
    tok = backend.tokenizer
    assert tok.decode(reply_ids(out, backend._stop_ids), skip_special_tokens=True) == out.text
    expected = forward_logprobs(backend, meta["prompt_ids"], meta["token_ids"], temperature)
    assert torch.allclose(torch.tensor(meta["logprobs"]), expected, atol=1e-4), (meta["logprobs"], expected)


def test_logprobs_are_the_policy_at_the_sampling_temperature(tiny: LocalBackend) -> None:
    assert not tiny.lm.generation_config.top_k  # no top-k of the model's own: nothing but the temperature
    requests = [ask(p, seed=5, logprobs=True) for p in PROMPTS]
    for attempt in range(2):  # the second time, the prompts' prefixes come from the prefix cache
        outs = run(tiny, requests)
        for request, out in zip(requests, outs, strict=True):
            prompt = tiny.tokenizer.apply_chat_template(request.messages, tokenize=False, add_generation_prompt=True)
            assert out.meta["prompt_ids"] == tiny.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            check_record(tiny, out, temperature=0.7)
            # no penalty, mask, no-copy, top-k or top-p: the token was drawn from the policy at 0.7 itself
            assert out.meta["sampler_logprobs"] == pytest.approx(out.meta["logprobs"], abs=1e-6)
        assert (tiny.stats.prefix_reused_tokens > 0) == (attempt == 1)


def test_constrained_rows_record_the_sampled_ids_and_the_masked_distribution(
    tiny: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    sampled = spy_on_generate(tiny, monkeypatch)
    schema = action_json_schema()
    requests = [
        ask("act", json_schema=schema, max_new_tokens=30, seed=11, logprobs=True),
        ask("Hello, how are you today?", json_schema=schema, max_new_tokens=4, seed=11, logprobs=True),
        ask("choose", json_schema=ENUM_SCHEMA, max_new_tokens=40, seed=11, logprobs=True),
        ask("speak to me about the argument, my friend", json_schema=schema, max_new_tokens=30, logprobs=True),
    ]
    outs = run(tiny, requests)
    width = max(len(o.meta["prompt_ids"]) for o in outs)  # the left-padded prompts' width (nothing cached yet)
    assert {o.meta["finish_reason"] for o in outs} == {"stop", "length"}
    differ = False
    for row, out in enumerate(outs):
        ids = out.meta["token_ids"]
        if sampled is not None:
            assert sampled[0][row, width : width + len(ids)].tolist() == ids  # exactly what generate sampled
        if out.meta["finish_reason"] == "stop":
            json.loads(out.text)
        check_record(tiny, out, temperature=0.7)
        policy, sampler = torch.tensor(out.meta["logprobs"]), torch.tensor(out.meta["sampler_logprobs"])
        # the mask (and the closing steer) renormalise the policy onto the allowed tokens: never less likely
        assert (sampler >= policy - 1e-5).all(), (sampler, policy)
        assert (sampler <= 1e-6).all()
        differ = differ or bool((sampler - policy > 1e-3).any())
    assert differ


@pytest.mark.parametrize("temperature", [0.0, 0.9], ids=["greedy", "seeded"])
def test_recording_samples_the_same_tokens(
    uncached: LocalBackend, monkeypatch: pytest.MonkeyPatch, temperature: float
) -> None:
    sampled = spy_on_generate(uncached, monkeypatch)
    mixed = [  # constrained and free rows, with different limits (so per-row stopping too)
        ask(PROMPTS[1], json_schema=action_json_schema(), max_new_tokens=24, temperature=temperature, seed=3),
        ask(PROMPTS[0], json_schema=ENUM_SCHEMA, max_new_tokens=12, temperature=temperature, seed=4),
        ask(PROMPTS[2], max_new_tokens=20, temperature=temperature, seed=5),
    ]  # each row draws with its own seed
    plain = run(uncached, mixed)
    some = run(uncached, [ChatRequest(**{**r.__dict__, "logprobs": row != 1}) for row, r in enumerate(mixed)])
    every = run(uncached, [ChatRequest(**{**r.__dict__, "logprobs": True}) for r in mixed])
    if sampled is not None:
        assert len(sampled) == 3
        assert torch.equal(sampled[1], sampled[0]) and torch.equal(sampled[2], sampled[0])
    for outs in (some, every):
        assert [o.text for o in outs] == [o.text for o in plain]
        assert [o.meta["finish_reason"] for o in outs] == [o.meta["finish_reason"] for o in plain]
    assert not RECORD & set(some[1].meta) and not any(RECORD & set(o.meta) for o in plain)
    for row, out in enumerate(every):
        assert out.meta["token_ids"] == (some[row].meta["token_ids"] if row != 1 else out.meta["token_ids"])
        check_record(uncached, out, temperature=temperature or 1.0)
        if temperature == 0:  # the argmax: probability one under the sampler
            assert out.meta["sampler_logprobs"] == [0.0] * len(out.meta["token_ids"])


def test_without_logprobs_meta_is_as_before(tiny: LocalBackend) -> None:
    outs = run(
        tiny,
        [
            ask("act", json_schema=action_json_schema(), max_new_tokens=10, seed=2),
            ask("chat", max_new_tokens=5),
        ],
    )
    assert [set(o.meta) for o in outs] == [{"finish_reason", "batch_size", "constrained"}] * 2


def test_model_default_penalty_and_top_k_are_applied_alike_when_recording(
    uncached: LocalBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """generate puts a model's default repetition penalty ahead of the processors it is given, and its top-k after
    them; the recorded path moves both around its recorders and samples the same tokens."""
    config = uncached.lm.generation_config
    config.repetition_penalty, config.top_k = 1.8, 5
    sampled = spy_on_generate(uncached, monkeypatch)
    requests = [ask(p, max_new_tokens=20, temperature=1.3, top_p=0.9, seed=9) for p in PROMPTS]
    plain = run(uncached, requests)
    recorded = run(uncached, [ChatRequest(**{**r.__dict__, "logprobs": True}) for r in requests])
    if sampled is not None:
        assert torch.equal(sampled[0], sampled[1])
    assert [o.text for o in recorded] == [o.text for o in plain]
    config.repetition_penalty, config.top_k = 1.0, 0
    without = run(uncached, requests)
    assert [o.text for o in without] != [o.text for o in plain]  # the defaults did change what was sampled
    for out in recorded:
        check_record(uncached, out, temperature=1.3)  # still the raw policy: no penalty, no top-k
        policy, sampler = torch.tensor(out.meta["logprobs"]), torch.tensor(out.meta["sampler_logprobs"])
        assert not torch.allclose(policy, sampler, atol=1e-3)


def test_a_generation_config_that_cannot_be_recorded_fails_only_the_logprobs_request(tiny: LocalBackend) -> None:
    tiny.lm.generation_config.min_p = 0.05  # generate would add MinP after the last recorder
    bad, fine = asyncio.run(tiny.generate([ask("a", logprobs=True), ask("b")]))
    assert not bad.ok and "min_p" in str(bad.error) and str(bad.error).startswith("bad request")
    assert fine.ok and not RECORD & set(fine.meta)
    (greedy,) = asyncio.run(tiny.generate([ask("a", temperature=0.0, logprobs=True)]))  # min_p: sampling only
    assert greedy.ok and RECORD <= set(greedy.meta)
