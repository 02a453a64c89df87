"""A tiny randomly initialised chat model for the training tests, built in seconds without any download.

``make_tiny_model(dir)`` trains a small byte-level BPE tokenizer on the
library's own prompts (with a ChatML template) and saves a 2-layer Llama of
hidden size 64 next to it, so ``dir`` is a local model spec. Other training test
modules import it from here; this module's test checks the model plays.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from pathlib import Path

import pytest

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _corpus():
    from agents.prompt import render_prompt
    from sotopia_env.env import SocialEnv
    from sotopia_env.library import load_library
    from sotopia_env.sampler import eligible_setups

    library = load_library()
    for scenario in sorted(library.scenarios.values(), key=lambda s: s.id):
        for setup in eligible_setups(scenario, library)[:2]:
            observations, _ = SocialEnv(setup=setup).reset()
            for observation in observations.values():
                yield from (m["content"] for m in render_prompt(observation))
    yield '{"action_type": "speak", "argument": "Hi! Do you have a moment?"} {"action_type": "leave", "argument": ""}'


def make_tiny_model(dest: Path, vocab_size: int = 2048, hidden: int = 64, layers: int = 2) -> str:
    """Build and save the tiny model + tokenizer in ``dest``; return it as a model spec."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    LlamaForCausalLM(config).save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return str(dest)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Tiny models gain nothing from threads, and on a busy machine extra threads slow torch down many times over."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@lru_cache(maxsize=1)
def _cached(root: str) -> str:
    return make_tiny_model(Path(root) / "tiny-llama")


def tiny_model_spec(tmp_path_factory) -> str:
    """One tiny model per test session (pass pytest's ``tmp_path_factory``)."""
    return _cached(str(tmp_path_factory.getbasetemp()))


def test_tiny_model_plays_an_episode(tmp_path_factory):
    from episode_fixtures import setups

    from agents.llm import LLMAgent
    from episodes.runner import play
    from sotopia_env.backends.base import GenerationSettings
    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.env import EnvConfig
    from sotopia_env.evaluation import RuleBasedEvaluator
    from training.experts import ScriptedExpert

    backend = LocalBackend.from_spec(tiny_model_spec(tmp_path_factory))
    agent = LLMAgent(backend, GenerationSettings(temperature=1.0, max_new_tokens=16, seed=0))
    log = asyncio.run(play(setups()[0], [agent, ScriptedExpert()], RuleBasedEvaluator(), EnvConfig(max_turns=2)))
    assert log.status == "rated" and log.turns
    backend.close()
