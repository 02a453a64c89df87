"""Episode GRPO's update runs a shared prompt prefix once (training/shared_prefix.py: one packed row, a block
mask): the same loss and the same gradient as running every sequence alone, on a tiny random model with a LoRA
whose weights matter."""

from __future__ import annotations

import random

import pytest
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, loss_batches, policy_loss
from sotopia_env.training.episode_rollouts import Sample
from sotopia_env.training.shared_prefix import prefix_batches

PREFIX = 80  # what a group's turns share (the system message and the scenario, in real prompts)


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(5, 250) for _ in range(n)]


def _samples() -> list[Sample]:
    """Three turns of one start (a shared 80-token prefix, then different conversations and replies of different
    lengths) and one of another start (sharing nothing)."""
    rng = random.Random(0)
    shared = _ids(rng, PREFIX)
    prompts = [shared + _ids(rng, 7), shared + _ids(rng, 30), shared + _ids(rng, 1), _ids(rng, 60)]
    out = []
    for prompt, reply in zip(prompts, (5, 12, 3, 9), strict=True):
        completion = _ids(rng, reply)
        logprobs = [-rng.uniform(0.5, 3.0) for _ in completion]
        out.append(Sample(prompt, completion, logprobs, [v - rng.uniform(0, 0.5) for v in logprobs]))
    return out


def test_prefix_batches_group_the_turns_of_one_start_and_cap_the_batch():
    samples = _samples()
    batches = prefix_batches(samples, lambda s: s.prompt_ids, most=8)
    shared = sorted((length, len(members)) for length, members in batches)
    assert shared == [(0, 1), (PREFIX, 3)]  # the three share exactly the prefix; the fourth runs alone
    capped = prefix_batches(samples, lambda s: s.prompt_ids, most=2)
    assert sorted(len(members) for _, members in capped) == [1, 1, 2]
    # a prompt that is the prefix plus one token keeps that token: the prefix stops one short of it
    short = Sample(samples[0].prompt_ids[: PREFIX + 1], [7], [-1.0], [-1.0])
    [(length, members)] = prefix_batches([short, samples[0]], lambda s: s.prompt_ids, most=8)
    assert length == PREFIX and len(members) == 2
    assert prefix_batches(samples[:1], lambda s: s.prompt_ids, most=8) == [(0, samples[:1])]


def _peft_model(spec):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    lora = LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(spec), lora)
    torch.manual_seed(0)
    with torch.no_grad():  # an adapter that changes the logits, so that its gradient is not trivial
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.2)
    model.eval()
    return model


def _loss_and_grads(model, samples, advantages, config):
    trained = list(zip(samples, advantages, strict=True))
    tokens = sum(len(s.completion_ids) for s in samples)
    total, stats = 0.0, []
    model.zero_grad(set_to_none=True)
    batches = loss_batches(model, trained, config)
    for shared, chunk in batches:
        loss, chunk_stats = policy_loss(model, [s for s, _ in chunk], [a for _, a in chunk], config, tokens, shared)
        loss.backward()
        total += float(loss.detach())
        stats.append(chunk_stats)
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    kl = sum(s.approx_kl for s in stats)
    return total, grads, kl, batches


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_a_shared_prefix_gives_the_loss_and_gradient_of_each_sequence_alone(tmp_path_factory, beta):
    import torch

    model = _peft_model(tiny_model_spec(tmp_path_factory))
    samples, advantages = _samples(), [1.0, -0.5, 0.25, -1.0]
    alone = EpisodeGRPOConfig(temperature=0.7, beta=beta, prefix_batch=1)
    together = EpisodeGRPOConfig(temperature=0.7, beta=beta, prefix_batch=8)
    loss_a, grads_a, kl_a, batches_a = _loss_and_grads(model, samples, advantages, alone)
    loss_b, grads_b, kl_b, batches_b = _loss_and_grads(model, samples, advantages, together)
    assert len(batches_a) == 4 and len(batches_b) == 2  # really shared: two forwards instead of four
    assert loss_b == pytest.approx(loss_a, rel=1e-5, abs=1e-7)
    assert kl_b == pytest.approx(kl_a, rel=1e-4, abs=1e-7)
    assert grads_a.keys() == grads_b.keys()
    for name, grad in grads_a.items():
        torch.testing.assert_close(grads_b[name], grad, rtol=1e-4, atol=1e-6, msg=name)
    assert max(float(g.abs().max()) for g in grads_a.values()) > 1e-4  # the gradients compared are not all 0


def test_without_sdpa_attention_every_sequence_runs_alone():
    """The packed row's block mask is a boolean 4-D mask, which only SDPA attention reads as such."""
    from types import SimpleNamespace

    trained = [(s, 1.0) for s in _samples()]
    config = EpisodeGRPOConfig(prefix_batch=8, micro_batch_size=1)
    eager = SimpleNamespace(config=SimpleNamespace(_attn_implementation="eager"))
    assert [(shared, len(chunk)) for shared, chunk in loss_batches(eager, trained, config)] == [(0, 1)] * 4
    sdpa = SimpleNamespace(config=SimpleNamespace(_attn_implementation="sdpa"))
    assert sorted(shared for shared, _ in loss_batches(sdpa, trained, config)) == [0, PREFIX]


def test_a_packed_row_trains_under_activation_checkpointing_too(tmp_path_factory):
    """The packed row needs no cache, so checkpointed layers (which keep none) share the prefix as well."""
    import torch

    model = _peft_model(tiny_model_spec(tmp_path_factory))
    samples, advantages = _samples(), [1.0, -0.5, 0.25, -1.0]
    config = EpisodeGRPOConfig(temperature=0.7, prefix_batch=8)
    loss_a, grads_a, _, _ = _loss_and_grads(model, samples, advantages, config)
    model.base_model.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    loss_b, grads_b, _, batches = _loss_and_grads(model, samples, advantages, config)
    assert sorted(shared for shared, _ in batches) == [0, PREFIX]
    assert loss_b == pytest.approx(loss_a, rel=1e-5, abs=1e-7)
    for name, grad in grads_a.items():
        torch.testing.assert_close(grads_b[name], grad, rtol=1e-4, atol=1e-6, msg=name)
