"""The model and LoRA helpers every trainer shares: precision, loading, adapters, checkpoints, saving.

``training.sft`` (SFT), ``training.grpo`` (text GRPO) and ``training.episode_grpo`` (GRPO on whole episodes)
all make the same decisions through these functions: bf16 on CUDA, 4-bit QLoRA on CUDA with bitsandbytes, a
new LoRA or the adapter being continued, and an output directory that is a model spec.

bf16 on a CPU is autocast: the weights stay fp32 and the matrix products run in bf16. It is chosen by default
only on CPUs that compute bf16 natively (``cpu_bf16_native``: AVX512-BF16 or AMX); elsewhere the products are
emulated and several times slower than fp32 (benchmarks/README section 3). ``tests/test_cpu_bf16.py`` holds the
numerics check: the first steps' losses under CPU autocast stay within 2% of fp32's.

CPU bf16 products go through oneDNN, which keeps a compiled primitive per matrix shape in two caches (oneDNN's
own and ideep's), 1,024 entries each by default. Episode GRPO's forward passes change length every time, so over
a run those caches grew the RSS by 1.2 GB in 8 steps (benchmarks/README section 10, run 13);
``bound_cpu_bf16_caches`` caps them (fp32 products do not use them).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from sotopia_env.model_ref import write_model_ref
from sotopia_env.training.base_config import BaseTrainConfig
from sotopia_env.training.lm_head import score_labelled_positions_only
from sotopia_env.training.rss import keep_heap_small

ONEDNN_CACHE_VARIABLES = ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")  # oneDNN's cache, ideep's
ONEDNN_CACHE_ENTRIES = "128"  # compiled bf16 primitives kept per cache: a forward and backward pass's shapes
ADAPTER_DIR = "adapter"
CHECKPOINTS_DIR = "checkpoints"


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def bitsandbytes_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("bitsandbytes") is not None


def decide_precision(config: BaseTrainConfig, full_finetune: bool = False) -> tuple[bool, bool]:
    """``(bf16, qlora)``: explicit settings win; otherwise bf16 on CUDA and on CPUs with native bf16 (autocast),
    QLoRA on CUDA with bitsandbytes (never for a full fine-tune)."""
    cuda = cuda_available()
    if config.bf16 is not None:
        bf16 = config.bf16
    else:
        bf16 = _bf16_supported() if cuda else cpu_bf16_native()
    qlora = config.qlora if config.qlora is not None else cuda and bitsandbytes_available() and not full_finetune
    if qlora and not cuda:
        raise ValueError("qlora needs a CUDA GPU (bitsandbytes 4-bit)")
    if bf16 and not cuda:
        bound_cpu_bf16_caches()
    return bf16, qlora


def bound_cpu_bf16_caches() -> None:
    """Cap oneDNN's per-shape primitive caches (see the module docstring) unless the environment sets them. Both
    are read when the first bf16 product runs, so this must come before it."""
    for name in ONEDNN_CACHE_VARIABLES:
        os.environ.setdefault(name, ONEDNN_CACHE_ENTRIES)


def _bf16_supported() -> bool:
    import torch

    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def cpu_bf16_native() -> bool:
    """Whether this CPU has bf16 matrix instructions (AVX512-BF16 or AMX-BF16), read from /proc/cpuinfo; False
    where that cannot be read."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def cpu_autocast(bf16: bool) -> Any:
    """The context a CPU forward pass runs in: bf16 autocast when ``bf16`` and no GPU, else nothing."""
    import contextlib

    import torch

    if bf16 and not cuda_available():
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def placement(bf16: bool) -> tuple[Any, Any]:
    """``(device, dtype)`` of a trainer's model: this process's GPU when there is one (cuda > mps > cpu, the
    local backend's ``pick_device``), its weights in bf16 there when ``bf16``, else float32 (a CPU's bf16 is
    autocast over float32 weights). TRL's trainers move the model to the same device themselves; our own loop
    (episode GRPO) moves it here."""
    import torch

    from sotopia_env.backends.devices import pick_device

    device = pick_device()
    return device, torch.bfloat16 if bf16 and device.type == "cuda" else torch.float32


def weights_placement(model: Any) -> str:
    """Where ``model``'s weights are and their dtype, in words: ``"cuda:0 bfloat16"``, ``"cpu float32"``."""
    weights = next(model.parameters())
    return f"{weights.device} {str(weights.dtype).removeprefix('torch.')}"


def load_tokenizer(path: str, adapter: str | None = None):
    from transformers import AutoTokenizer

    source = adapter if adapter and (Path(adapter) / "tokenizer_config.json").is_file() else path
    tokenizer = AutoTokenizer.from_pretrained(source)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(path: str, bf16: bool, qlora: bool, gradient_checkpointing: bool):
    """The base model: bf16 (on CUDA; on a CPU the weights stay fp32 under autocast) or fp32, or 4-bit NF4 (bf16
    compute) prepared for k-bit training. From here on the process trains lean: freed activations leave the RSS
    (``training.rss.keep_heap_small``) and TRL's LM head projects only the positions with a loss
    (``training.lm_head``)."""
    import torch
    from transformers import AutoModelForCausalLM

    keep_heap_small()
    score_labelled_positions_only()

    _, dtype = placement(bf16)
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


def adapter_setup(model, config: BaseTrainConfig, full_finetune: bool = False):
    """``(model, peft_config)``: the adapter being continued (loaded trainable), a new LoRA config, or neither
    (full fine-tune)."""
    from peft import LoraConfig, PeftModel

    if config.init_adapter:
        return PeftModel.from_pretrained(model, config.init_adapter, is_trainable=True), None
    if full_finetune:
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


def save_adapter_spec(trainer, out: Path, base_model: str, prompt: str) -> None:
    """``out`` as a model spec: the trained adapter and the tokenizer in ``out/adapter`` (``trainer.save_model``:
    the main process writes; under DeepSpeed ZeRO-3 or FSDP every rank joins the gather), and
    ``sotopia_model.json`` naming both and the prompt it was trained on."""
    trainer.save_model(str(out / ADAPTER_DIR))
    if trainer.args.should_save:
        write_model_ref(out, base_model, ADAPTER_DIR, prompt)


def save_model_spec(model, tokenizer, out: Path, base_model: str, prompt: str) -> None:
    """The same model spec from a loop of our own (one process, no trainer): ``training.episode_grpo``."""
    model.save_pretrained(str(out / ADAPTER_DIR))
    tokenizer.save_pretrained(str(out / ADAPTER_DIR))
    write_model_ref(out, base_model, ADAPTER_DIR, prompt)


def finish(trainer, result: Any, path: Path) -> None:
    """The main process saves ``result`` (a ``TrainResult`` or ``GRPOResult``) to ``path``; every rank waits for
    it, so that the next stage on any rank finds the saved model spec."""
    if trainer.args.should_save:
        result.save(path)
    trainer.accelerator.wait_for_everyone()


def training_args(config_class: type, config: Any, output_dir: Path, bf16: bool) -> dict[str, Any]:
    """The ``TrainingArguments`` fields every TRL trainer sets the same way (``config``: a ``BaseTrainConfig``
    with ``num_epochs``, ``batch_size`` and ``grad_accum``): schedule, batch, seed, precision, a log line per
    step, periodic checkpoints."""
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
        use_cpu=bf16 and not cuda_available(),  # bf16 on a CPU: the Trainer's autocast (transformers asks for this)
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
