"""The numerics check behind bf16 on a CPU (``training/model_setup.py``): autocast over fp32 weights trains
like fp32. The first steps' losses of an SFT run (the Trainer's autocast) and of an episode-GRPO update (our own
loop's) stay within 2% of fp32's on the tiny model, and the weights stay fp32."""

from __future__ import annotations

import pytest
import torch
from episode_fixtures import make_episode
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

from sotopia_env.training.dataset import build_dataset
from sotopia_env.training.sft import SFTTrainConfig, train_sft

TOLERANCE = 0.02  # relative, per step


def sft_losses(tmp_path_factory, out, bf16: bool) -> list[float]:
    data, _ = build_dataset([make_episode(i, setup_index=i % 2) for i in range(2)])
    config = SFTTrainConfig(
        base_model=tiny_model_spec(tmp_path_factory), output_dir=str(out), bf16=bf16, learning_rate=5e-3,
        batch_size=2, max_steps=3, save_steps=3, max_length=1024, seed=0, progress=False,
    )  # fmt: skip
    result = train_sft(data, config)
    assert result.bf16 is bf16 and result.steps == 3
    return result.losses


def test_sft_under_cpu_autocast_tracks_fp32(tmp_path_factory, tmp_path) -> None:
    fp32 = sft_losses(tmp_path_factory, tmp_path / "fp32", bf16=False)
    bf16 = sft_losses(tmp_path_factory, tmp_path / "bf16", bf16=True)
    assert len(fp32) == len(bf16) == 3
    for a, b in zip(fp32, bf16, strict=True):
        assert abs(a - b) <= TOLERANCE * abs(a), (fp32, bf16)
    assert fp32 != bf16  # autocast did run: the products were bf16


def test_episode_grpo_loss_under_cpu_autocast_tracks_fp32(tmp_path_factory) -> None:
    """One policy-loss forward/backward on the same samples, fp32 and autocast: the losses within 2%, the
    gradients pointing the same way, the trained weights still fp32."""
    from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, load_policy, policy_loss
    from sotopia_env.training.episode_rollouts import Sample
    from sotopia_env.training.model_setup import cpu_autocast

    config = EpisodeGRPOConfig(base_model=tiny_model_spec(tmp_path_factory), temperature=0.7, bf16=True)
    model, _, bf16_chosen, _ = load_policy(config)
    assert bf16_chosen
    torch.manual_seed(0)
    samples = [
        Sample(
            prompt_ids=torch.randint(5, 500, (n,)).tolist(),
            completion_ids=torch.randint(5, 500, (m,)).tolist(),
            logprobs=[-2.0] * m,
            sampler_logprobs=[-1.9] * m,
        )  # fmt: skip
        for n, m in ((40, 8), (25, 12))
    ]
    tokens = sum(len(s.completion_ids) for s in samples)
    results = []
    for bf16 in (False, True):
        model.zero_grad(set_to_none=True)
        with cpu_autocast(bf16):
            loss, _ = policy_loss(model, samples, [1.0, -0.5], config, tokens)
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.requires_grad])
        results.append((float(loss), grads))
    (loss32, grad32), (loss16, grad16) = results
    assert abs(loss16 - loss32) <= TOLERANCE * abs(loss32) and loss16 != loss32
    assert (
        torch.nn.functional.cosine_similarity(grad32, grad16, dim=0) > 0.9
    )  # bf16 products: the same direction, with noise
    assert all(p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("bf16", [True, False])
def test_cpu_autocast_is_a_no_op_unless_asked(bf16: bool) -> None:
    from sotopia_env.training.model_setup import cpu_autocast

    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with cpu_autocast(bf16):
        out = a @ b
    assert out.dtype == (torch.bfloat16 if bf16 else torch.float32)
