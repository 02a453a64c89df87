"""Prompt prefix caching in the local backend: the batch layout gives the same logits as a full prefill,
generation is unchanged by it, and the cache keeps to its budget.

Most tests use the tiny random llama from ``conftest.py``; the ``model``-marked one plays a real episode
with the embedded SmolLM2-135M.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from sotopia_env.backends import prefix_cache
from sotopia_env.backends.base import ChatRequest
from sotopia_env.backends.local import LocalBackend
from sotopia_env.backends.prefix_cache import CachedPrompt, Hit, PrefixCache


def conversation(lines: int, who: str = "Ann") -> list[dict[str, str]]:
    """An agent-style prompt whose history grows by one line per turn (so turn N+1 extends turn N's prefix)."""
    history = "\n".join(f"Turn {i}: hello, how are you today? {i}" for i in range(lines))
    return [
        {"role": "system", "content": f"You are {who}. Hello, how are you today?"},
        {"role": "user", "content": f"Conversation so far:\n{history}\n\nYour move, {who}."},
    ]


def ask(messages: list[dict[str, str]], tokens: int = 8) -> ChatRequest:
    return ChatRequest(messages=messages, temperature=0.0, max_new_tokens=tokens)


def tokens_of(backend: LocalBackend, messages: list[dict[str, str]]) -> torch.Tensor:
    text = backend.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return torch.tensor(backend.tokenizer(text, add_special_tokens=False)["input_ids"])


def forward(model, layout: prefix_cache.Layout, cache) -> torch.Tensor:
    """One forward pass over a layout, as ``generate``'s prefill makes it: only the uncached columns are
    fed, with position ids counted along the attention mask (so pads in between do not count)."""
    positions = (layout.attention_mask.cumsum(-1) - 1).clamp(min=0)
    return model(
        input_ids=layout.input_ids[:, layout.cached :],
        attention_mask=layout.attention_mask,
        position_ids=positions[:, layout.cached :],
        cache=cache,
    ).logits


@pytest.fixture
def pair(tiny_model_dir: Path) -> tuple[LocalBackend, LocalBackend]:
    """The same tiny model with the prefix cache on and off."""
    on = LocalBackend.from_spec(str(tiny_model_dir), batch_window_s=0.02)
    off = LocalBackend.from_spec(str(tiny_model_dir), batch_window_s=0.02, prefix_cache_mb=0)
    return on, off


def test_layout_gives_the_logits_of_a_full_prefill(tiny_model_dir: Path) -> None:
    backend = LocalBackend.from_spec(str(tiny_model_dir))
    model, pad = backend.lm, int(backend.tokenizer.pad_token_id)
    first = [tokens_of(backend, conversation(n, who)) for n, who in ((2, "Ann"), (5, "Bob"))]
    with torch.inference_mode():
        layout, cache = prefix_cache.assemble(model, first, [prefix_cache.MISS] * 2, pad)
        forward(model, layout, cache)
        stored = prefix_cache.extract(cache, layout, first)
        assert [len(e.tokens) for e in stored] == [len(t) for t in first]
        assert stored[0].keys[0].shape[1] == len(first[0])
        # the next turns: each extends its row's prompt; a third row has nothing cached
        later = [tokens_of(backend, conversation(n, who)) for n, who in ((4, "Ann"), (9, "Bob"), (3, "Cy"))]
        hits = []
        for entry, prompt in zip(stored, later[:2], strict=True):
            length = prefix_cache.common_prefix(entry.tokens, prompt)
            assert 10 < length < len(prompt)
            hits.append(Hit(entry, length))
        hits.append(prefix_cache.MISS)
        layout, cache = prefix_cache.assemble(model, later, hits, pad)
        assert layout.cached == max(h.length for h in hits)
        logits = forward(model, layout, cache)
        for row, prompt in enumerate(later):
            alone = model(input_ids=prompt[None]).logits[0, -1]
            torch.testing.assert_close(logits[row, -1], alone, atol=1e-4, rtol=1e-4)


def test_generation_is_the_same_with_and_without_the_cache(pair: tuple[LocalBackend, LocalBackend]) -> None:
    on, off = pair
    for turn in range(1, 5):
        requests = [ask(conversation(2 * turn, "Ann")), ask(conversation(turn + 3, "Bob"), tokens=5)]
        if turn == 3:
            requests.append(ask(conversation(1, "Cy")))  # a newcomer batched with cached rows
        cached = asyncio.run(on.generate(requests))
        plain = asyncio.run(off.generate(requests))
        assert [c.text for c in cached] == [p.text for p in plain]
        assert [c.prompt_tokens for c in cached] == [p.prompt_tokens for p in plain]
        assert all(c.ok for c in cached)
    assert off.stats.prefix_reused_tokens == 0
    # turns 2..4 of both agents reuse their previous prompt up to the end of the older history
    assert on.stats.prefix_reused_tokens > on.stats.prompt_tokens / 3
    assert len(on._prefix) == 3  # one entry per conversation: each turn's entry replaced the one it came from


def test_reused_tokens_are_the_common_prefix(pair: tuple[LocalBackend, LocalBackend]) -> None:
    on, _ = pair
    first, second = conversation(3), conversation(6)
    asyncio.run(on.generate([ask(first)]))
    assert on.stats.prefix_reused_tokens == 0
    asyncio.run(on.generate([ask(second)]))
    expected = prefix_cache.common_prefix(tokens_of(on, first), tokens_of(on, second))
    assert on.stats.prefix_reused_tokens == expected > 0


def test_an_identical_prompt_still_runs_its_last_token(pair: tuple[LocalBackend, LocalBackend]) -> None:
    on, off = pair
    request = ask(conversation(4))
    (a,) = asyncio.run(on.generate([request]))
    (b,) = asyncio.run(on.generate([request]))
    (c,) = asyncio.run(off.generate([request]))
    assert a.text == b.text == c.text
    assert on.stats.prefix_reused_tokens == b.prompt_tokens - 1


def test_rows_sharing_a_prompt_prefill_it_once(pair: tuple[LocalBackend, LocalBackend]) -> None:
    """A GRPO group's first turn: the same prompt in four rows (and a fifth that shares only its system
    message and early history); the shared prefix is prefilled once, the outputs are those without the cache."""
    on, off = pair
    same = conversation(6, "Ann")
    other = [same[0], {"role": "user", "content": same[1]["content"].replace("Your move, Ann.", "Bob speaks.")}]
    requests = [ask(same) for _ in range(4)] + [ask(other)]
    cached = asyncio.run(on.generate(requests))
    plain = asyncio.run(off.generate(requests))
    assert [c.text for c in cached] == [p.text for p in plain]
    assert on.stats.shared_prefixes == 1 and on.stats.generate_calls == 1
    length = len(tokens_of(on, same))
    shared = prefix_cache.common_prefix(tokens_of(on, same), tokens_of(on, other))
    assert 10 < shared < length - 1
    # the prefix of all five rows is the common part; the four identical rows then reuse all but their last
    # token from the entry that prefill left (the first row's, holding the whole prompt but its last token)
    assert on.stats.prefix_reused_tokens == 4 * (length - 1) + shared


def test_shared_prefixes_pick_the_longest_common_part() -> None:
    a, b = torch.arange(40), torch.cat([torch.arange(30), torch.tensor([99] * 10)])
    c = torch.tensor([7] * 40)
    miss = [prefix_cache.MISS] * 4
    prefixes = prefix_cache.shared_prefixes([a, b, a.clone(), c], miss, min_tokens=16)
    assert [p.tolist() for p in prefixes] == [list(range(39))]  # a with its copy; b and c left to their own
    assert prefix_cache.shared_prefixes([a, b], miss[:2], min_tokens=16)[0].tolist() == list(range(30))
    held = [Hit(None, 25), Hit(None, 25)]  # already cached up to 25: five more shared tokens are not worth it
    assert prefix_cache.shared_prefixes([a, b], held, min_tokens=16) == []
    assert prefix_cache.shared_prefixes([a], miss[:1], min_tokens=16) == []


def entry(tokens: list[int], heads: int = 1, dim: int = 4) -> CachedPrompt:
    n = len(tokens)
    return CachedPrompt(torch.tensor(tokens), [torch.zeros(heads, n, dim)], [torch.zeros(heads, n, dim)])


def test_cache_lookup_min_tokens_and_budget() -> None:
    one = entry(list(range(20)))
    cache = PrefixCache(max_bytes=3 * one.nbytes, min_tokens=5)
    cache.add(one, replaces=[])
    assert cache.lookup(torch.tensor([*range(10), 99])).length == 10
    assert cache.lookup(torch.tensor([0, 1, 2, 99])) == prefix_cache.MISS  # under min_tokens
    assert cache.lookup(torch.tensor(list(range(20)))).length == 19  # the last token is never taken
    assert cache.lookup(torch.tensor([7, 8, 9, 10, 11, 12])) == prefix_cache.MISS  # shared, but not a prefix

    longer = entry(list(range(30)))
    cache.add(longer, replaces=[one])
    assert len(cache) == 1 and cache.nbytes == longer.nbytes
    assert cache.lookup(torch.tensor(list(range(25)) + [0])).entry is longer

    others = [entry([100 + i] * 20) for i in range(3)]
    for other in others:
        cache.add(other, replaces=[])
    assert cache.nbytes <= cache.max_bytes
    assert cache.lookup(torch.tensor(list(range(25)) + [0])) == prefix_cache.MISS  # least recently used went first
    assert cache.lookup(torch.tensor([102] * 21)).entry is others[2]

    assert len(cache) == 3 and cache.nbytes == 3 * one.nbytes
    cache.add(entry(list(range(500))), replaces=[])  # bigger than the whole budget: not kept, nothing evicted
    assert len(cache) == 3 and cache.nbytes == 3 * one.nbytes


def test_sliding_window_models_are_not_cached(tmp_path: Path) -> None:
    from transformers import MistralConfig, MistralForCausalLM

    config = MistralConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, sliding_window=8,
    )  # fmt: skip
    assert not prefix_cache.supports(MistralForCausalLM(config))
    config.sliding_window = None
    assert prefix_cache.supports(MistralForCausalLM(config))


@pytest.mark.model
def test_embedded_model_episode_with_the_prefix_cache(embedded_model_path: str, two_friends) -> None:
    """A real 6-turn episode on SmolLM2-135M: every action parses, the same episode as without the cache."""
    from custom_agents import TalkingAgent

    from sotopia_env.actions import parse_action
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.env import EnvConfig
    from sotopia_env.episodes.runner import play

    settings = GenerationSettings(temperature=0.0, max_new_tokens=48)
    logs, stats = [], []
    for megabytes in (1024, 0):
        backend = LocalBackend.from_spec("smollm2-135m", prefix_cache_mb=megabytes)
        agents = [TalkingAgent(backend, settings) for _ in two_friends.agent_names]
        logs.append(asyncio.run(play(two_friends, agents, None, EnvConfig(max_turns=6))))
        stats.append(backend.stats)
        backend.close()
    cached, plain = logs
    assert not any(cached.agent_errors.values()) and len(cached.turns) == 6
    for turn in cached.turns:
        assert parse_action(turn.action.to_json()) == turn.action
    assert [(t.agent, t.action) for t in cached.turns] == [(t.agent, t.action) for t in plain.turns]
    assert stats[0].prefix_reused_tokens > stats[0].prompt_tokens / 2  # most of each prompt was the last one's
    assert stats[1].prefix_reused_tokens == 0
