"""Supervised fine-tuning on a prompt-completion dataset: TRL's ``SFTTrainer``, LoRA by default.

``train_sft(dataset, SFTTrainConfig(...))`` reads top to bottom:

1. decide precision and quantization (bf16 on CUDA; 4-bit QLoRA when CUDA and
   bitsandbytes are there, unless told otherwise);
2. load the tokenizer and the base model (an alias, hub id or model dir);
3. wrap it: a new LoRA adapter, or the adapter being continued
   (``init_adapter``, loaded trainable), or nothing for a full fine-tune;
4. train with ``SFTTrainer`` (loss on the completion tokens only), resuming
   from the last checkpoint in ``output_dir/checkpoints`` if there is one;
5. save a model the rest of the project can play: ``output_dir`` holds
   ``sotopia_model.json`` (``{"base": ..., "adapter": "adapter"}``) and the
   adapter, or, for a full fine-tune, the whole transformers model. Either way
   ``output_dir`` is a model spec (``sotopia-env run --agent1 OUTPUT_DIR``).

The loss of every step is returned (``TrainResult.losses``) and kept in
``output_dir/train_result.json``.

Memory: each layer's activations are recomputed in the backward (``gradient_checkpointing``, on by default),
the LM head projects only the completion's positions (``training.lm_head``) and freed activations leave the RSS
(``training.rss.keep_heap_small``); ``tests/test_training_memory.py`` checks that the loss and its gradients are
still plain cross-entropy over the completion, and ``benchmarks/memory.py`` measures each stage's peak.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sotopia_env.model_ref import write_model_ref
from sotopia_env.training.base_config import BaseTrainConfig
from sotopia_env.training.dataset import dataset_prompt
from sotopia_env.training.model_setup import (
    CHECKPOINTS_DIR,
    adapter_setup,
    decide_precision,
    finish,
    last_checkpoint,
    load_model,
    load_tokenizer,
    release_memory,
    save_adapter_spec,
    training_args,
)

RESULT_FILE = "train_result.json"


@dataclass
class SFTTrainConfig(BaseTrainConfig):
    """How to fine-tune (SFT): the shared fields of ``BaseTrainConfig`` and these."""

    output_dir: str = "outputs/sft"
    full_finetune: bool = False  # every weight instead of a LoRA
    warmup: float = 0.0  # warmup steps (>= 1) or a ratio of all steps (< 1)
    num_epochs: float = 2.0  # max_steps > 0 overrides it
    batch_size: int = 4
    grad_accum: int = 1
    max_length: int | None = 2048  # longer examples are cut (keep_start); ones left with no completion are dropped
    extra_args: dict[str, Any] = field(default_factory=dict)  # any other SFTConfig field

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.full_finetune and (self.qlora or self.init_adapter):
            raise ValueError("full_finetune cannot be combined with qlora or init_adapter")
        for name in ("batch_size", "grad_accum"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, not {self.learning_rate}")


@dataclass
class TrainResult:
    model_dir: str  # a model spec: the local backend loads it
    losses: list[float]  # training loss of every logged step, in order
    steps: int
    examples: int  # after SFTTrainer's preparation (examples cut to nothing are dropped)
    seconds: float
    resumed_from: str | None = None
    qlora: bool = False
    bf16: bool = False

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2))

    @classmethod
    def load(cls, path: Path) -> TrainResult:
        """The result ``save`` wrote."""
        return cls(**json.loads(path.read_text()))


def train_sft(dataset, config: SFTTrainConfig) -> TrainResult:
    """Fine-tune ``config.base_model`` on ``dataset`` (prompt-completion rows); see the module docstring."""
    if len(dataset) == 0:
        raise ValueError("the training dataset is empty (did the filters drop every episode?)")
    prompt = dataset_prompt(dataset) or config.trained_prompt  # what the model directory records
    if config.prompt and prompt != config.prompt:
        raise ValueError(f"the dataset was rendered in the {prompt!r} prompt, the config names {config.prompt!r}")
    started = time.perf_counter()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = out / CHECKPOINTS_DIR

    # 1-3. precision, tokenizer, base model, what to train
    trainer, bf16, qlora = sft_trainer(dataset, config, checkpoints)

    # 4. train, resuming from the last checkpoint if a previous run left one
    resume = last_checkpoint(checkpoints)
    trainer.train(resume_from_checkpoint=resume)
    losses = [float(h["loss"]) for h in trainer.state.log_history if "loss" in h and math.isfinite(h["loss"])]

    # 5. save something the local backend can load (the main process writes; every rank joins the gather)
    if config.full_finetune:
        trainer.save_model(str(out))  # with the tokenizer
        if trainer.args.should_save:
            write_model_ref(out, str(out), None, prompt)  # names itself: a model dir that records its prompt
    else:
        save_adapter_spec(trainer, out, config.base_model, prompt)
    result = TrainResult(
        model_dir=str(out),
        losses=losses,
        steps=int(trainer.state.global_step),
        examples=len(trainer.train_dataset),
        seconds=round(time.perf_counter() - started, 2),
        resumed_from=resume,
        qlora=qlora,
        bf16=bf16,
    )
    finish(trainer, result, out / RESULT_FILE)
    del trainer
    release_memory()
    return result


def sft_trainer(dataset, config: SFTTrainConfig, checkpoints: Path):
    """``(trainer, bf16, qlora)``: TRL's ``SFTTrainer`` on ``dataset``, ready to train (steps 1-3 of the module
    docstring)."""
    from trl import SFTTrainer

    from sotopia_env.embedded_models import resolve_model_path

    bf16, qlora = decide_precision(config, config.full_finetune)
    base_path = resolve_model_path(config.base_model)
    tokenizer = load_tokenizer(base_path, config.init_adapter)
    model = load_model(base_path, bf16, qlora, config.gradient_checkpointing)
    model, peft_config = adapter_setup(model, config, config.full_finetune)  # a new LoRA, the one continued, or none
    trainer = SFTTrainer(
        model=model,
        args=sft_config(config, checkpoints, bf16),
        train_dataset=dataset.select_columns(["prompt", "completion"]),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    return trainer, bf16, qlora


def sft_config(config: SFTTrainConfig, output_dir: Path, bf16: bool):
    """TRL's ``SFTConfig`` for ``config``: completion-only loss, a log line per step, periodic checkpoints."""
    from trl import SFTConfig

    return SFTConfig(
        **training_args(SFTConfig, config, output_dir, bf16),
        warmup_steps=config.warmup,
        max_length=config.max_length,
        completion_only_loss=True,
        **config.extra_args,
    )
