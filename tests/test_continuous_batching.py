"""The local backend's continuous-batching scheduler: requests join a running batch and leave it on their own,
outputs are those of one-at-a-time ``generate``, cancelled callers free their rows, and keys/values stay within
their budget.

The tiny random llama of ``conftest.py`` throughout; the ``model``-marked test runs SmolLM2-135M.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
import torch
from action_prompts import ASKS, action_prompt

from sotopia_env.actions import action_json_schema, parse_action
from sotopia_env.backends import slot_cache
from sotopia_env.backends.base import ChatRequest, Completion
from sotopia_env.backends.local import LocalBackend

ENUM_SCHEMA = {
    "type": "object",
    "properties": {"action_type": {"type": "string", "enum": ["speak", "leave"]}},
    "required": ["action_type"],
    "additionalProperties": False,
}
PROMPTS = ["hi", "Hello, how are you today?", "speak to me about the argument, my friend, please", "act", "tell me"]


def ask(text: str, **kwargs) -> ChatRequest:
    kwargs.setdefault("temperature", 0.0)
    kwargs.setdefault("max_new_tokens", 12)
    return ChatRequest(messages=[{"role": "user", "content": text}], **kwargs)


def backend(model_dir: Path | str, **kwargs) -> LocalBackend:
    kwargs.setdefault("batch_window_s", 0.02)
    return LocalBackend.from_spec(str(model_dir), **kwargs)


def one_at_a_time(model: LocalBackend, requests: list[ChatRequest]) -> list[Completion]:
    return [asyncio.run(model.generate([r]))[0] for r in requests]


def sampled(out: Completion) -> int:
    """Tokens a reply took, its stop token included."""
    return out.completion_tokens + (out.meta["finish_reason"] == "stop")


def mixed_requests() -> list[ChatRequest]:
    """Free and constrained rows, greedy and seeded, with limits from 3 to 60 tokens."""
    schema = action_json_schema()
    return [
        ask(PROMPTS[0], max_new_tokens=3),
        ask(PROMPTS[1], max_new_tokens=40),
        ask(PROMPTS[2], json_schema=schema, max_new_tokens=60),
        ask(PROMPTS[3], json_schema=ENUM_SCHEMA, max_new_tokens=20),
        ask(PROMPTS[4], temperature=1.0, seed=3, max_new_tokens=25),
        ask(PROMPTS[1], json_schema=schema, temperature=0.7, seed=4, max_new_tokens=50),
    ]


def test_outputs_are_generates_one_at_a_time(tiny_model_dir: Path) -> None:
    """Greedy rows give generate's one-at-a-time reply token for token; seeded rows the same sample."""
    reference = one_at_a_time(backend(tiny_model_dir, continuous=False, prefix_cache_mb=0), mixed_requests())
    scheduled = backend(tiny_model_dir)
    assert scheduled._scheduler is not None
    together = asyncio.run(scheduled.generate(mixed_requests()))
    assert [o.text for o in together] == [o.text for o in reference]
    assert [o.meta["finish_reason"] for o in together] == [o.meta["finish_reason"] for o in reference]
    assert scheduled.stats.generate_calls == 1 and scheduled.stats.peak_rows == len(together)
    # one step per token of the longest reply (its first came from the prefill), not per row
    assert scheduled.stats.decode_steps == max(sampled(o) for o in together) - 1


def test_a_request_joins_a_running_batch_and_leaves_before_it(tiny_model_dir: Path) -> None:
    model = backend(tiny_model_dir)
    long, short = ask(PROMPTS[1], max_new_tokens=150), ask(PROMPTS[0], max_new_tokens=6)
    long_alone, short_alone = one_at_a_time(model, [long, short])
    assert long_alone.meta["finish_reason"] == "length"  # the tiny model does not stop: 150 tokens it is
    steps = model.stats.decode_steps

    async def scenario() -> tuple[Completion, Completion, bool]:
        running = asyncio.ensure_future(model.generate([long]))
        while model.stats.decode_steps < steps + 5:  # the long row is decoding
            await asyncio.sleep(0.001)
        (short_out,) = await model.generate([short])
        still_running = not running.done()
        (long_out,) = await running
        return long_out, short_out, still_running

    long_out, short_out, still_running = asyncio.run(scenario())
    assert still_running  # the short reply came back while the long one was being written
    assert short_out.meta["batch_size"] == long_out.meta["batch_size"] == 2
    assert (long_out.text, short_out.text) == (long_alone.text, short_alone.text)
    # the short row rode along: no step was added for it (150 tokens: the first from the prefill, 149 steps)
    assert model.stats.decode_steps - steps == 149


def test_a_cancelled_request_leaves_and_the_others_go_on(tiny_model_dir: Path) -> None:
    model = backend(tiny_model_dir)
    first, second = ask(PROMPTS[1], max_new_tokens=120), ask(PROMPTS[2], max_new_tokens=60)
    (second_alone,) = one_at_a_time(model, [second])
    steps = model.stats.decode_steps

    async def scenario() -> Completion:
        cancelled = asyncio.ensure_future(model.generate([first]))  # slot 0: the second row moves into it
        kept = asyncio.ensure_future(model.generate([second]))
        while model.stats.decode_steps < steps + 10:
            await asyncio.sleep(0.001)
        cancelled.cancel()
        (out,) = await kept
        return out

    out = asyncio.run(scenario())
    assert model.stats.cancelled == 1 and model._scheduler is not None and not model._scheduler.rows
    assert out.text == second_alone.text
    assert model.stats.decode_steps - steps == sampled(out) - 1  # the cancelled row's 120 tokens were not decoded


def test_the_grammar_holds_for_every_row_of_a_mixed_batch(tiny_model_dir: Path) -> None:
    model = backend(tiny_model_dir, max_batch_size=16)
    schema = action_json_schema()
    requests = [
        ask(f"{PROMPTS[i % len(PROMPTS)]} {i}", json_schema=schema if i % 3 else ENUM_SCHEMA, temperature=1.0,
            seed=i, max_new_tokens=80)
        for i in range(12)
    ] + [ask(f"free {i}", temperature=1.0, seed=50 + i, max_new_tokens=30) for i in range(4)]  # fmt: skip
    outs = asyncio.run(model.generate(requests))
    assert model.stats.peak_rows == 16
    for request, out in zip(requests, outs, strict=True):
        assert out.ok and out.meta["constrained"] == (request.json_schema is not None)
        if request.json_schema is not None:
            assert out.meta["finish_reason"] == "stop", out.text
            data = json.loads(out.text)
            if request.json_schema is schema:
                assert parse_action(out.text).action_type.value == data["action_type"]


def test_kv_memory_stays_within_its_budget_under_64_requests(tiny_model_dir: Path) -> None:
    """1 MiB of slots holds 16 rows of 256 columns of the tiny model: 64 requests run at most 16 at a time."""
    bounded = backend(tiny_model_dir, max_batch_size=64, kv_cache_mb=1)
    requests = [ask(f"{PROMPTS[i % len(PROMPTS)]} {i}", max_new_tokens=10 + i % 7) for i in range(64)]
    outs = asyncio.run(asyncio.wait_for(bounded.generate(requests), timeout=120))
    assert all(o.ok for o in outs)
    assert bounded.stats.peak_rows == 16 and 0 < bounded.stats.kv_peak_bytes <= 1 << 20
    free = backend(tiny_model_dir, max_batch_size=64)
    unbounded = asyncio.run(free.generate(requests))
    assert free.stats.peak_rows == 64 and free.stats.kv_peak_bytes > 1 << 20
    assert [o.text for o in outs] == [o.text for o in unbounded]
    assert bounded._scheduler is not None and bounded._scheduler.cache.nbytes() == 0  # released when idle


def test_the_slot_layout_right_aligns_each_rows_queries() -> None:
    columns, positions, width = slot_cache.layout([3, 0], [2, 4])
    assert columns.tolist() == [[5, 6, 3, 4], [0, 1, 2, 3]] and width == 7
    assert positions.tolist() == [[0, 0, 3, 4], [0, 1, 2, 3]]
    seen = slot_cache.mask([3, 0], [2, 4], width, torch.float32, "cpu")[:, 0] == 0
    assert seen[0].int().tolist() == [  # two padding queries (their own column only), then cached + causal
        [0, 0, 0, 0, 0, 1, 0], [0, 0, 0, 0, 0, 0, 1], [1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0]
    ]  # fmt: skip
    assert seen[1].int().tolist() == [[1] * k + [0] * (7 - k) for k in range(1, 5)]


@pytest.mark.model
def test_embedded_model_scheduler_matches_generate(embedded_model_path: str) -> None:
    model = LocalBackend.from_spec("smollm2-135m", batch_window_s=0.05)
    reference = LocalBackend(model.lm, model.tokenizer, model.model, continuous=False, prefix_cache_mb=0)
    schema = action_json_schema()
    requests = [
        ChatRequest(messages=action_prompt(f"Alex{i}", heard), json_schema=schema, temperature=0.0, max_new_tokens=80)
        for i, heard in enumerate(ASKS)
    ]
    alone = one_at_a_time(reference, requests)
    together = asyncio.run(model.generate(requests))
    assert [o.text for o in together] == [o.text for o in alone]
    assert model.stats.peak_rows == len(requests) and model.stats.generate_calls == 1
    assert all(o.meta["finish_reason"] == "stop" for o in together)


def test_a_failure_while_admitting_answers_every_request(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = backend(tiny_model_dir)
    real = model._hits

    def broken(tokens):
        raise RuntimeError("out of memory while looking up prefixes\nmore")

    monkeypatch.setattr(model, "_hits", broken)
    outs = asyncio.run(asyncio.wait_for(model.generate([ask("a"), ask("b")]), timeout=60))
    assert all(not o.ok and "out of memory" in str(o.error) and "\n" not in str(o.error) for o in outs)
    monkeypatch.setattr(model, "_hits", real)
    assert all(o.ok for o in asyncio.run(model.generate([ask("a"), ask("b")])))
