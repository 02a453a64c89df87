"""Where a model runs and in what precision: the one decision the local backend and every trainer share.

``pick_device``: CUDA, else Apple's MPS, else the CPU (DESIGN.md: cuda > mps > cpu). Under a launcher
(``accelerate launch``, ``torchrun``) each process takes its own GPU, ``cuda:$LOCAL_RANK``. ``pick_dtype``: bf16
on CUDA, float32 elsewhere. A trainer's CPU bf16 is autocast over float32 weights instead
(``training.model_setup``).
"""

from __future__ import annotations

import os

import torch


def pick_device(device: str = "auto") -> torch.device:
    """``device`` as a torch device; ``auto``: this process's GPU when there is one, else MPS, else the CPU."""
    if device != "auto":
        return torch.device(device)
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def pick_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    """bf16 on CUDA, float32 elsewhere, unless asked otherwise (``"bfloat16"``, ``torch.float16``, ...)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None or dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    value = getattr(torch, dtype.removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r}")
    return value
