"""Supervised fine-tuning on a prompt-completion dataset: TRL's ``SFTTrainer``, LoRA by default.

``train(dataset, TrainConfig(...))`` reads top to bottom:

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
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sotopia_env.model_ref import write_model_ref

ADAPTER_DIR = "adapter"
CHECKPOINTS_DIR = "checkpoints"
RESULT_FILE = "train_result.json"


@dataclass
class TrainConfig:
    """How to fine-tune. ``None`` for ``bf16``/``qlora`` means: decide from the hardware."""

    base_model: str = "smollm2-135m"  # alias, hub id or model dir
    output_dir: str = "outputs/sft"
    init_adapter: str | None = None  # continue training this LoRA adapter (self-reinforcement)
    full_finetune: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    lora_dropout: float = 0.05
    lora_target_modules: list[str] | str = "all-linear"
    learning_rate: float = 1e-4
    lr_scheduler_type: str = "linear"
    warmup: float = 0.0  # warmup steps (>= 1) or a ratio of all steps (< 1)
    num_epochs: float = 2.0
    max_steps: int = -1  # > 0 overrides num_epochs
    batch_size: int = 4
    grad_accum: int = 1
    max_length: int | None = 2048  # longer examples are cut (keep_start); ones left with no completion are dropped
    seed: int = 0
    gradient_checkpointing: bool = False
    bf16: bool | None = None
    qlora: bool | None = None
    save_steps: int = 50
    save_total_limit: int = 2
    logging_steps: int = 1
    progress: bool = True
    extra_args: dict[str, Any] = field(default_factory=dict)  # any other SFTConfig field

    def __post_init__(self) -> None:
        if self.full_finetune and (self.qlora or self.init_adapter):
            raise ValueError("full_finetune cannot be combined with qlora or init_adapter")
        for name in ("lora_r", "batch_size", "grad_accum", "save_steps", "logging_steps"):
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


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def bitsandbytes_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("bitsandbytes") is not None


def decide_precision(config: TrainConfig) -> tuple[bool, bool]:
    """``(bf16, qlora)``: explicit settings win; otherwise bf16 on CUDA, QLoRA on CUDA with bitsandbytes."""
    cuda = cuda_available()
    bf16 = config.bf16 if config.bf16 is not None else cuda and _bf16_supported()
    qlora = config.qlora if config.qlora is not None else cuda and bitsandbytes_available() and not config.full_finetune
    if qlora and not cuda:
        raise ValueError("qlora needs a CUDA GPU (bitsandbytes 4-bit)")
    return bf16, qlora


def _bf16_supported() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def load_tokenizer(path: str, adapter: str | None = None):
    from transformers import AutoTokenizer

    source = adapter if adapter and (Path(adapter) / "tokenizer_config.json").is_file() else path
    tokenizer = AutoTokenizer.from_pretrained(source)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str, bf16: bool, qlora: bool, gradient_checkpointing: bool):
    """The base model: bf16 or fp32, or 4-bit NF4 (bf16 compute) prepared for k-bit training."""
    import torch
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if bf16 else torch.float32
    if not qlora:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    from peft import prepare_model_for_kbit_training
    from transformers import BitsAndBytesConfig

    quantization = BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_compute_dtype=torch.bfloat16,
        bnb_4bit_use_double_quant=True,
    )
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.bfloat16, quantization_config=quantization, device_map={"": torch.cuda.current_device()}
    )
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)


def adapter_setup(model, config: TrainConfig):
    """``(model, peft_config)``: the adapter being continued (loaded trainable), a new LoRA config, or neither
    (full fine-tune). ``config`` is any config with the LoRA fields of ``TrainConfig``."""
    from peft import LoraConfig, PeftModel

    if config.init_adapter:
        return PeftModel.from_pretrained(model, config.init_adapter, is_trainable=True), None
    if config.full_finetune:
        return model, None
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.lora_target_modules,
        task_type="CAUSAL_LM",
    )
    return model, lora


def checkpointing_arg(config_class: type, enabled: bool) -> dict[str, bool]:
    """The gradient-checkpointing switch under its name in ``config_class`` (transformers 5 renamed
    gradient_checkpointing to activation_checkpointing; the old name warns)."""
    name = "activation_checkpointing" if "activation_checkpointing" in config_class.__dataclass_fields__ else None
    return {name or "gradient_checkpointing": enabled}


def last_checkpoint(checkpoints: Path) -> str | None:
    if not checkpoints.is_dir():
        return None
    from transformers.trainer_utils import get_last_checkpoint

    return get_last_checkpoint(str(checkpoints))


def train(dataset, config: TrainConfig) -> TrainResult:
    """Fine-tune ``config.base_model`` on ``dataset`` (prompt-completion rows); see the module docstring."""
    from trl import SFTTrainer

    from sotopia_env.embedded_models import resolve_model_path

    if len(dataset) == 0:
        raise ValueError("the training dataset is empty (did the filters drop every episode?)")
    started = time.perf_counter()
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoints = out / CHECKPOINTS_DIR

    # 1-2. precision, tokenizer, base model
    bf16, qlora = decide_precision(config)
    base_path = resolve_model_path(config.base_model)
    tokenizer = load_tokenizer(base_path, config.init_adapter)
    model = load_model(base_path, bf16, qlora, config.gradient_checkpointing)

    # 3. what to train: a new LoRA, the adapter being continued, or every weight
    model, peft_config = adapter_setup(model, config)

    # 4. train, resuming from the last checkpoint if a previous run left one
    args = sft_config(config, checkpoints, bf16)
    trainer = SFTTrainer(
        model=model,
        args=args,
        train_dataset=dataset.select_columns(["prompt", "completion"]),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    resume = last_checkpoint(checkpoints)
    trainer.train(resume_from_checkpoint=resume)
    losses = [float(h["loss"]) for h in trainer.state.log_history if "loss" in h and math.isfinite(h["loss"])]

    # 5. save something the local backend can load (the main process writes; every rank joins the gather)
    if config.full_finetune:
        trainer.save_model(str(out))  # with the tokenizer
    else:
        save_adapter_spec(trainer, out, config.base_model)
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
    del trainer, model
    release_memory()
    return result


def save_adapter_spec(trainer, out: Path, base_model: str) -> None:
    """``out`` as a model spec: the trained adapter and the tokenizer in ``out/adapter`` (``trainer.save_model``:
    the main process writes; under DeepSpeed ZeRO-3 or FSDP every rank joins the gather), and
    ``sotopia_model.json`` naming both."""
    trainer.save_model(str(out / ADAPTER_DIR))
    if trainer.args.should_save:
        write_model_ref(out, base_model, ADAPTER_DIR)


def save_model_spec(model, tokenizer, out: Path, base_model: str) -> None:
    """The same model spec from a loop of our own (one process, no trainer): ``training.episode_grpo``."""
    model.save_pretrained(str(out / ADAPTER_DIR))
    tokenizer.save_pretrained(str(out / ADAPTER_DIR))
    write_model_ref(out, base_model, ADAPTER_DIR)


def finish(trainer, result: Any, path: Path) -> None:
    """The main process saves ``result`` (a ``TrainResult`` or ``GRPOResult``) to ``path``; every rank waits for
    it, so that the next stage on any rank finds the saved model spec."""
    if trainer.args.should_save:
        result.save(path)
    trainer.accelerator.wait_for_everyone()


def sft_config(config: TrainConfig, output_dir: Path, bf16: bool):
    """TRL's ``SFTConfig`` for ``config``: completion-only loss, a log line per step, periodic checkpoints."""
    from trl import SFTConfig

    return SFTConfig(
        **training_args(SFTConfig, config, output_dir, bf16),
        warmup_steps=config.warmup,
        max_length=config.max_length,
        completion_only_loss=True,
        **config.extra_args,
    )


def training_args(config_class: type, config: TrainConfig, output_dir: Path, bf16: bool) -> dict[str, Any]:
    """The ``TrainingArguments`` fields every stage sets the same way (``config``: a ``TrainConfig`` or any
    config with its fields): schedule, batch, seed, precision, a log line per step, periodic checkpoints."""
    return dict(
        output_dir=str(output_dir),
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler_type,
        num_train_epochs=config.num_epochs,
        max_steps=config.max_steps,
        per_device_train_batch_size=config.batch_size,
        gradient_accumulation_steps=config.grad_accum,
        seed=config.seed,
        data_seed=config.seed,
        bf16=bf16,
        logging_steps=config.logging_steps,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        report_to="none",
        disable_tqdm=not config.progress,
        dataloader_pin_memory=cuda_available(),
        **checkpointing_arg(config_class, config.gradient_checkpointing),
    )


def release_memory() -> None:
    """Collect garbage and return cached GPU memory (between training and playing)."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
