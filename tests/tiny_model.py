"""Tiny randomly initialised chat models for tests, built in seconds without any download.

``make_tiny_model`` trains a byte-level BPE tokenizer on ``corpus`` (with a ChatML template) and saves a
small Llama next to it, so the directory is a local model spec. ``conftest.py`` builds a very small one
with peaked logits for the local-backend tests; ``test_training_tiny.py`` a larger one on the library's own
prompts for the training tests. Plain functions, no pytest.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def make_tiny_model(
    dest: Path,
    corpus: Iterable[str],
    *,
    vocab_size: int,
    hidden: int,
    heads: int,
    kv_heads: int,
    pad_token: str,
    layers: int = 2,
    max_positions: int = 4096,
    tie_embeddings: bool = False,
    initializer_range: float = 0.02,
) -> str:
    """Build and save the tokenizer and a ``layers``-layer Llama (seed 0) in ``dest``; return it as a spec."""
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
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token=pad_token
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        initializer_range=initializer_range,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=tie_embeddings,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    return str(dest)
