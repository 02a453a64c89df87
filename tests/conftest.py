"""Shared fixtures. Embedded-model tests are marked ``model``; Redis tests skip loudly without REDIS_URL."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SOTOPIA_SHARED", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def embedded_model_path() -> str:
    """The embedded SmolLM2-135M, pulled into the cache on first use (about a minute, once)."""
    from sotopia_env.models import resolve_model_path

    return resolve_model_path("smollm2-135m", progress=False)


@pytest.fixture(scope="session")
def library():
    from sotopia_env.library import load_library

    return load_library()


@pytest.fixture
def two_friends(library):
    """A setup whose relationship is ``friend``."""
    from sotopia_env.sampler import eligible_setups

    scenario = next(
        s for s in sorted(library.scenarios.values(), key=lambda s: s.id) if s.relationship.name == "friend"
    )
    return eligible_setups(scenario, library)[0]


@pytest.fixture
def setup_at():
    """Build a setup for a scenario whose relationship is overridden (for visibility tests)."""

    def build(library, relationship: str):
        from sotopia_env.profiles import Relationship
        from sotopia_env.sampler import EpisodeSetup

        scenario = sorted(library.scenarios.values(), key=lambda s: s.id)[0]
        scenario = scenario.model_copy(update={"relationship": Relationship.parse(relationship), "constraints": None})
        chars = sorted(library.characters.values(), key=lambda c: c.id)[:2]
        return EpisodeSetup(scenario=scenario, characters=chars)

    return build


# a ChatML-style template for the tiny test model below
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer llama with random weights and a 300-token byte-level BPE tokenizer, saved as a model dir."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    corpus = ['Hello, how are you today? {"action_type": "speak", "argument": "hi there"}'] * 5
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=512,
        initializer_range=0.2,  # peaked logits: greedy choices are far from ties
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
