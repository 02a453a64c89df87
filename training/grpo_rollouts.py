"""Text GRPO's completions from the local backend: TRL's ``rollout_func``.

TRL's own generation (``model.generate``, a batch at a time) is replaced by the local backend's continuous
batching on the model being trained: the ``num_generations`` copies of a prompt share its prefill (one prefix,
prefilled once), and short completions leave the batch as they end. The rollout returns what was sampled, as TRL
asks: the prompt's ids, the sampled ids (the end-of-turn token included when the completion stopped) and, per
token, its log-probability under the distribution it was drawn from.

The completions are sampled as TRL would sample them: at the trainer's temperature, top-p and repetition penalty,
with top-k as the trainer sets it (0: none), from the model in eval mode (no LoRA dropout), each row with a seed
of its own. Settings the backend cannot apply (``min_p``, ``generation_kwargs``) or vLLM leave generation to
TRL (``uses_local_rollouts``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sotopia_env.backends.base import ChatRequest
from sotopia_env.backends.local import LocalBackend

ROWS_PER_ROLLOUT_SEED = 100_000  # seeds of one rollout call: seed + call * this + row


def uses_local_rollouts(args: Any) -> bool:
    """Whether a ``GRPOConfig`` leaves nothing the local backend cannot sample as TRL would."""
    return not (args.use_vllm or args.min_p or args.generation_kwargs)


def local_rollout_func(seed: int, max_batch_size: int = 64) -> Callable[[list[Any], Any], dict[str, list]]:
    """A ``rollout_func`` for ``GRPOTrainer`` (see the module docstring)."""
    calls = 0

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, list]:
        nonlocal calls
        first_seed = seed + calls * ROWS_PER_ROLLOUT_SEED
        calls += 1
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = trainer.processing_class
        requests = [
            ChatRequest(
                messages=list(prompt),
                temperature=trainer.temperature,
                top_p=trainer.top_p,
                max_new_tokens=trainer.max_completion_length,
                repetition_penalty=trainer.repetition_penalty,
                seed=first_seed + row,
                logprobs=True,
            )
            for row, prompt in enumerate(prompts)
        ]
        training, padding_side, top_k = model.training, tokenizer.padding_side, model.generation_config.top_k
        model.eval()
        model.generation_config.top_k = trainer.top_k or None
        backend = LocalBackend(model, tokenizer, "policy", max_batch_size=max_batch_size, batch_window_s=0.0)
        try:
            outs = backend.generate_now(requests)
        finally:
            backend.close()  # its caches hold this step's weights only
            model.train(training)
            model.generation_config.top_k = top_k
            tokenizer.padding_side = padding_side
        failed = [out.error for out in outs if not out.ok]
        if failed:
            raise RuntimeError(f"local rollouts: {len(failed)} of {len(outs)} completions failed: {failed[0]}")
        return {
            "prompt_ids": [out.meta["prompt_ids"] for out in outs],
            "completion_ids": [out.meta["token_ids"] for out in outs],
            "logprobs": [out.meta["sampler_logprobs"] for out in outs],
        }

    return rollout
