"""TRL's fused LM head, made to project only the positions that carry a loss on a CPU too.

TRL's trainers (``SFTTrainer``, ``GRPOTrainer``) never build the full ``[batch, length, vocabulary]`` logits:
``trl.trainer.utils.add_fused_lm_head`` projects the hidden states through the LM head in tiles and keeps
per-token statistics (log-probability, entropy, top-1). On a GPU with Triton it projects only the positions whose
label is not ``-100`` (the completion); everywhere else it projects every position, prompt and padding included,
so that a compiling backend (AWS Neuron) sees one tile shape. On a CPU that is a ``[4096, 32768]`` fp32 tile and
about eight temporaries of its size in the torch fallback of the kernel, for every position of the batch: 1.8 GiB
of the 2.2 GiB a BC step on SmolLM2-135M held (benchmarks/README, "Training memory"). Eager CPU code compiles
nothing, so ``score_labelled_positions_only`` lets TRL take its own compact path there: the same kernel, on the
completion's rows only. Per-token results are those of the full path; the loss is checked against plain
full-logits cross-entropy in ``tests/test_training_memory.py``.
"""

from __future__ import annotations

from typing import Any

_PATCHED = "_sotopia_compact_on_cpu"


def score_labelled_positions_only() -> bool:
    """Let TRL's fused LM head project only the labelled positions on a CPU too (see the module docstring). Idempotent;
    False where this TRL has no such switch (then it keeps its own behaviour)."""
    try:
        from trl.trainer import utils as trl_utils
    except ImportError:
        return False
    decide = getattr(trl_utils, "_use_triton", None)
    if decide is None:
        return False
    if getattr(decide, _PATCHED, False):
        return True

    def compact(device: Any) -> bool:
        return device.type == "cpu" or decide(device)

    setattr(compact, _PATCHED, True)
    trl_utils._use_triton = compact  # read by add_fused_lm_head only; the kernels keep their own reference
    return True
