"""The one device decision (``backends/devices.py``, ``training.model_setup.placement``): cuda > mps > cpu, each
launched process on its own GPU, bf16 weights on CUDA only. Availability is faked here (this machine has no GPU);
the CPU path itself runs for real in the trainers' tests (``placement`` in their results)."""

from __future__ import annotations

import pytest
import torch

from sotopia_env.backends.devices import pick_device, pick_dtype
from sotopia_env.training.model_setup import placement, weights_placement


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    """``fake(cuda=..., mps=...)``: what torch reports as available."""

    def set_available(cuda: bool, mps: bool = False) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
        monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    return set_available


def test_cuda_wins_then_mps_then_the_cpu(fake) -> None:
    fake(cuda=True, mps=True)
    assert pick_device() == torch.device("cuda", 0)
    fake(cuda=False, mps=True)
    assert pick_device() == torch.device("mps")
    fake(cuda=False)
    assert pick_device() == torch.device("cpu")
    fake(cuda=True)
    assert pick_device("cpu") == torch.device("cpu")  # asked for, not decided


def test_each_launched_process_takes_its_own_gpu(fake, monkeypatch: pytest.MonkeyPatch) -> None:
    fake(cuda=True)
    monkeypatch.setenv("LOCAL_RANK", "3")  # as accelerate launch / torchrun set it
    assert pick_device() == torch.device("cuda", 3)
    fake(cuda=False)
    assert pick_device() == torch.device("cpu")  # a CPU launch ignores the rank


def test_a_trainers_weights_are_bf16_on_cuda_only(fake) -> None:
    fake(cuda=True)
    assert placement(bf16=True) == (torch.device("cuda", 0), torch.bfloat16)
    assert placement(bf16=False) == (torch.device("cuda", 0), torch.float32)
    fake(cuda=False, mps=True)
    assert placement(bf16=True) == (torch.device("mps"), torch.float32)
    fake(cuda=False)
    assert placement(bf16=True) == (torch.device("cpu"), torch.float32)  # CPU bf16 is autocast over fp32 weights
    assert pick_dtype(None, torch.device("cuda", 1)) == torch.bfloat16  # the local backend's, from the same place


def test_weights_placement_says_where_and_in_what() -> None:
    layer = torch.nn.Linear(2, 2).to(torch.bfloat16)
    assert weights_placement(layer) == "cpu bfloat16"
