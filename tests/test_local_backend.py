"""The local transformers backend: batching, padding, JSON constraints, adapters, errors.

Most tests use a tiny randomly initialised llama with a tiny byte-level BPE tokenizer
built here (no download). The ``model``-marked test uses the embedded SmolLM2-135M.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from action_prompts import ASKS, action_prompt

from sotopia_env.actions import ACTION_TYPES, action_json_schema, parse_action
from sotopia_env.backends import local as local_backend
from sotopia_env.backends.base import ChatRequest
from sotopia_env.backends.local import LocalBackend, pick_dtype, read_model_ref
from sotopia_env.backends.no_copy import NGRAM, NoCopy, ngram_table

ENUM_SCHEMA = {
    "type": "object",
    "properties": {"action_type": {"type": "string", "enum": ["speak", "leave"]}},
    "required": ["action_type"],
    "additionalProperties": False,
}


@pytest.fixture
def tiny(tiny_model_dir: Path) -> LocalBackend:
    return LocalBackend.from_spec(str(tiny_model_dir), max_batch_size=8, batch_window_s=0.02)


def ask(text: str, **kwargs) -> ChatRequest:
    kwargs.setdefault("temperature", 0.0)
    kwargs.setdefault("max_new_tokens", 6)
    return ChatRequest(messages=[{"role": "user", "content": text}], **kwargs)


async def concurrently(backend: LocalBackend, requests: list[ChatRequest]):
    """Each request in its own ``generate`` call, all at once (like many agents)."""
    results = await asyncio.gather(*(backend.generate([r]) for r in requests))
    return [out for (out,) in results]


def test_concurrent_calls_share_one_generate(tiny: LocalBackend) -> None:
    outs = asyncio.run(concurrently(tiny, [ask(f"hello {i}") for i in range(6)]))
    assert all(o.ok and o.text for o in outs)
    assert tiny.generate_calls == 1
    assert {o.meta["batch_size"] for o in outs} == {6}


def test_max_batch_size_splits_the_queue(tiny: LocalBackend) -> None:
    tiny.max_batch_size = 4
    outs = asyncio.run(concurrently(tiny, [ask(f"hi {i}") for i in range(10)]))
    assert all(o.ok for o in outs)
    assert tiny.generate_calls == 3
    assert sorted(o.meta["batch_size"] for o in outs) == [2, 2] + [4] * 8


def test_one_call_with_many_requests_is_one_batch(tiny: LocalBackend) -> None:
    outs = asyncio.run(tiny.generate([ask("a"), ask("b c d e f"), ask("how are you")]))
    assert len(outs) == 3 and all(o.ok for o in outs)
    assert tiny.generate_calls == 1


def test_left_padding_matches_unbatched_greedy(tiny: LocalBackend) -> None:
    prompts = ["hi", "Hello, how are you today?", "speak to me about the argument, my friend, please"]
    alone = [asyncio.run(tiny.generate([ask(p, max_new_tokens=8)]))[0] for p in prompts]
    together = asyncio.run(concurrently(tiny, [ask(p, max_new_tokens=8) for p in prompts]))
    assert tiny.generate_calls == len(prompts) + 1
    assert [o.text for o in together] == [o.text for o in alone]
    assert [o.prompt_tokens for o in together] == [o.prompt_tokens for o in alone]
    for prompt, out in zip(prompts, together, strict=True):
        text = tiny.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        assert out.prompt_tokens == len(tiny.tokenizer(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("continuous", [True, False], ids=["scheduler", "generate"])
def test_sampling_settings_and_row_limits(tiny_model_dir: Path, continuous: bool) -> None:
    """The scheduler runs rows of any sampling settings together; generate's batches group them."""
    tiny = LocalBackend.from_spec(str(tiny_model_dir), batch_window_s=0.02, continuous=continuous)
    requests = [ask("a", max_new_tokens=3), ask("b", max_new_tokens=9), ask("c", temperature=0.8, seed=1)]
    outs = asyncio.run(concurrently(tiny, requests))
    assert tiny.generate_calls == (1 if continuous else 2)  # generate: greedy rows together, the sampled one alone
    assert outs[0].meta["batch_size"] == outs[1].meta["batch_size"] == (3 if continuous else 2)
    for out, limit in ((outs[0], 3), (outs[1], 9)):
        assert out.completion_tokens <= limit
        assert (out.completion_tokens == limit) == (out.meta["finish_reason"] == "length")


def test_seed_makes_sampling_repeatable(tiny: LocalBackend) -> None:
    request = ask("tell me", temperature=1.0, seed=7, max_new_tokens=12)
    first = asyncio.run(tiny.generate([request]))[0].text
    second = asyncio.run(tiny.generate([request]))[0].text
    assert first == second


def test_a_seeded_sample_does_not_depend_on_its_batch(tiny: LocalBackend) -> None:
    """Each row draws with its own seeded generator: the same reply alone, first or last in a batch of others,
    and a different seed gives another reply."""
    mine = ask("tell me a story", temperature=1.0, seed=11, max_new_tokens=16)
    others = [ask(f"something else {i}", temperature=1.0, seed=100 + i, max_new_tokens=16) for i in range(3)]
    (alone,) = asyncio.run(tiny.generate([mine]))
    first = asyncio.run(tiny.generate([mine, *others]))[0]
    last = asyncio.run(tiny.generate([*others, mine]))[-1]
    assert alone.text == first.text == last.text and alone.completion_tokens > 3
    reseeded = [asyncio.run(tiny.generate([replace(mine, seed=seed)]))[0].text for seed in (12, 13, 14)]
    assert any(text != alone.text for text in reseeded)


def test_json_constrained_rows_mix_with_free_rows(tiny: LocalBackend) -> None:
    requests = [ask("act", json_schema=ENUM_SCHEMA, max_new_tokens=40), ask("chat", max_new_tokens=10)]
    constrained, free = asyncio.run(concurrently(tiny, requests))
    assert tiny.generate_calls == 1
    assert constrained.meta["constrained"] and not free.meta["constrained"]
    assert constrained.meta["finish_reason"] == "stop"
    assert json.loads(constrained.text)["action_type"] in {"speak", "leave"}


def test_json_cut_short_is_returned_and_counted(tiny: LocalBackend) -> None:
    (out,) = asyncio.run(tiny.generate([ask("act", json_schema=action_json_schema(), max_new_tokens=3)]))
    assert out.ok and out.meta["finish_reason"] == "length"
    assert out.text.startswith("{") and out.completion_tokens == 3
    assert tiny.stats.json_truncated == 1


@pytest.mark.parametrize("continuous", [True, False], ids=["scheduler", "generate"])
def test_failed_batch_errors_every_row_then_recovers(
    tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch, continuous: bool
) -> None:
    tiny = LocalBackend.from_spec(str(tiny_model_dir), batch_window_s=0.02, continuous=continuous)
    entry = "forward" if continuous else "generate"  # the scheduler runs the model's forward passes itself
    real = getattr(tiny.lm, entry)
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB\nmore details")
        return real(*args, **kwargs)

    monkeypatch.setattr(tiny.lm, entry, flaky)
    failed = asyncio.run(concurrently(tiny, [ask("x"), ask("y"), ask("z")]))
    assert [o.ok for o in failed] == [False] * 3
    assert all(o.text == "" and "out of memory" in o.error and "\n" not in o.error for o in failed)
    assert tiny.stats.failed_batches == 1
    again = asyncio.run(concurrently(tiny, [ask("x"), ask("y")]))
    assert all(o.ok and o.text for o in again)


def test_a_bad_request_fails_alone(tiny: LocalBackend) -> None:
    outs = asyncio.run(tiny.generate([ask("fine"), ask("zero", max_new_tokens=0), ask("bad", json_schema={"type": 5})]))
    assert outs[0].ok and outs[0].text
    assert not outs[1].ok and "max_new_tokens" in str(outs[1].error)
    assert not outs[2].ok and str(outs[2].error).startswith("bad request")


def test_closed_backend_answers_with_errors(tiny: LocalBackend) -> None:
    tiny.close()
    (out,) = asyncio.run(tiny.generate([ask("hello")]))
    assert not out.ok and "closed" in str(out.error)


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning")
def test_lora_adapter_loads_on_top(tiny_model_dir: Path, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    torch.manual_seed(1)
    peft_model = get_peft_model(base, lora)
    trained = tmp_path / "trained"
    peft_model.save_pretrained(str(trained / "adapter"))
    (trained / "sotopia_model.json").write_text(json.dumps({"base": str(tiny_model_dir), "adapter": "adapter"}))

    backend = LocalBackend.from_spec(str(trained))
    adapter_dir = str((trained / "adapter").resolve())
    assert backend.model == f"{tiny_model_dir}+{adapter_dir}"
    ids = torch.tensor([[5, 9, 30, 41, 7]])
    with torch.no_grad():
        plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)(ids).logits
        expected = peft_model.eval()(ids).logits
        got = backend.lm(ids).logits
    assert not torch.allclose(got, plain, atol=1e-4)
    assert torch.allclose(got, expected, atol=1e-4)

    by_argument = LocalBackend.from_spec(str(tiny_model_dir), adapter=adapter_dir)
    assert by_argument.model == backend.model
    (out,) = asyncio.run(backend.generate([ask("hello")]))
    assert out.ok


def test_model_ref_and_dtype_helpers(tmp_path: Path) -> None:
    assert read_model_ref("smollm2-135m") == ("smollm2-135m", None)
    (tmp_path / "sotopia_model.json").write_text(json.dumps({"base": "smollm2-135m", "adapter": "a"}))
    assert read_model_ref(str(tmp_path)) == ("smollm2-135m", str((tmp_path / "a").resolve()))
    with pytest.raises(ValueError, match="already names an adapter"):
        read_model_ref(str(tmp_path), adapter="other")
    assert pick_dtype(None, torch.device("cpu")) == torch.float32
    assert pick_dtype(None, torch.device("cuda")) == torch.bfloat16
    assert pick_dtype("float16", torch.device("cpu")) == torch.float16
    with pytest.raises(ValueError, match="unknown dtype"):
        pick_dtype("float13", torch.device("cpu"))


@pytest.mark.model
def test_embedded_model_emits_valid_actions_in_one_batch(embedded_model_path: str) -> None:
    backend = LocalBackend.from_spec("smollm2-135m", batch_window_s=0.05)
    assert backend.model == "smollm2-135m" and backend.device.type in ("cpu", "cuda", "mps")
    schema = action_json_schema()
    requests = [
        # greedy: deterministic; sampled arguments of a 135M model can ramble past any token limit
        ChatRequest(messages=action_prompt(f"Alex{i}", heard), json_schema=schema, temperature=0.0, max_new_tokens=120)
        for i, heard in enumerate(ASKS)
    ]
    outs = asyncio.run(concurrently(backend, requests))
    assert backend.generate_calls == 1
    for out in outs:
        assert out.ok and out.meta["finish_reason"] == "stop", out.text
        data = json.loads(out.text)
        assert set(data) == {"action_type", "argument"} and data["action_type"] in ACTION_TYPES
        assert parse_action(out.text).action_type.value == data["action_type"]
        assert out.prompt_tokens > 50 and 0 < out.completion_tokens < 120
    assert backend.stats.json_truncated == 0
    # asked again, each row may not copy its first reply's argument: still valid, and no 4-token run copied
    said = [json.loads(out.text)["argument"] for out in outs]
    again = [replace(r, avoid_copying=(text,)) for r, text in zip(requests, said, strict=True)]
    for out, text in zip(asyncio.run(concurrently(backend, again)), said, strict=True):
        assert out.ok and parse_action(out.text).action_type.value in ACTION_TYPES, out.text
        assert shared_runs(backend.tokenizer, json.loads(out.text)["argument"], text) == set(), (out.text, text)
        if len(text.split()) >= 3:  # nor open as the first reply did
            assert json.loads(out.text)["argument"].split()[:3] != text.split()[:3], (out.text, text)
    # a GRPO group's first turn: one prompt in three rows, prefilled once for all
    assert backend.stats.shared_prefixes == 0
    backend._prefix.clear()  # nothing cached holds it
    group = asyncio.run(backend.generate([requests[0]] * 3))
    assert backend.stats.shared_prefixes == 1 and len({out.text for out in group}) == 1 and group[0].ok


def shared_runs(tokenizer, reply: str, earlier: str, n: int = NGRAM) -> set[tuple[int, ...]]:
    """The n-token runs ``reply`` copies from ``earlier`` (tokenized as inside a JSON string, like no_copy does)."""

    def runs(text: str) -> set[tuple[int, ...]]:
        ids = tokenizer(json.dumps(text)[1:-1], add_special_tokens=False)["input_ids"]
        return {tuple(ids[k : k + n]) for k in range(len(ids) - n + 1)}

    return runs(reply) & runs(earlier)


def test_avoid_copying_keeps_a_reply_from_copying_runs_of_an_earlier_text(tiny: LocalBackend) -> None:
    (free,) = asyncio.run(tiny.generate([ask("Say something.", max_new_tokens=24)]))
    (again,) = asyncio.run(tiny.generate([ask("Say something.", max_new_tokens=24)]))
    assert again.text == free.text
    (avoided,) = asyncio.run(tiny.generate([ask("Say something.", max_new_tokens=24, avoid_copying=(free.text,))]))
    # a random model's tokens need not be the tokenizer's own split of their text, so only the change is
    # checked here; the embedded-model test below checks that no run is copied
    assert avoided.ok and avoided.text != free.text


OPENING_REGEX = r'\{"action_type": "speak", "argument": "I (am|an) (here|there)"\}'


def test_an_argument_never_opens_as_an_earlier_turn_did(tiny: LocalBackend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The reply may open "I am" or "I an" (the two part at the opening's last letter, where the guard acts); an
    earlier turn opened "I am ...", so with it to avoid, every sampled reply opens "I an", split into tokens
    however the model likes. (The no-copy tables are
    emptied here: they could ban the copied run by themselves.)"""
    monkeypatch.setattr(local_backend, "banned_tables", lambda tokenizer, texts: [{} for _ in texts])
    earlier = ("I am sure about that, really.", "One")

    def openings(avoid: tuple[str, ...]) -> set[str]:
        requests = [
            ask(
                "Say something.",
                regex=OPENING_REGEX,
                temperature=1.0,
                seed=seed,
                max_new_tokens=90,
                avoid_copying=avoid,
            )  # fmt: skip
            for seed in range(12)
        ]
        outs = asyncio.run(tiny.generate(requests))
        assert all(o.meta["finish_reason"] == "stop" for o in outs)
        return {" ".join(json.loads(o.text)["argument"].split()[:2]) for o in outs}

    assert openings(()) == {"I am", "I an"}  # both, free
    assert openings(earlier) == {"I an"}


def test_token_texts_complete_an_opening_only_at_a_word_end(tiny: LocalBackend) -> None:
    from sotopia_env.backends.no_copy import TokenTexts, openings

    assert openings(("I am not sure", "Short", "  Spaced   out   words  here")) == ["I am", "Spaced out"]
    texts = TokenTexts(tiny.tokenizer, len(tiny.tokenizer))
    completing = {tiny.tokenizer.decode([t]) for t in texts.completing("n")}
    assert "n" in completing or any(t.startswith("n") for t in completing)
    assert all(t == "n" or not (t[1].isalnum() or t[1] in "'_-") for t in completing)


def test_no_copy_bans_the_next_token_of_a_copied_run_but_never_empties_a_row() -> None:
    table = ngram_table([[5, 6, 7, 8]], n=3)
    assert table == {(5, 6): {7}, (6, 7): {8}}
    prompt = [1, 1]
    ids = torch.tensor([prompt + [5, 6], prompt + [6, 5], prompt + [6, 7]])
    scores = torch.zeros(3, 10)
    scores[2] = float("-inf")
    scores[2, 8] = 0.0  # the grammar allows only the banned token: it stays
    out = NoCopy([table, table, table], prompt_len=2, n=3)(ids, scores.clone())
    assert out[0, 7] == float("-inf") and torch.isfinite(out[0, :7]).all() and torch.isfinite(out[0, 8:]).all()
    assert torch.isfinite(out[1]).all()
    assert out[2, 8] == 0.0
    early = NoCopy([table], prompt_len=3, n=3)(torch.tensor([prompt + [5, 6]]), torch.zeros(1, 10))
    assert torch.isfinite(early).all()  # one reply token so far: no run of n - 1 to extend yet
