"""What keeps training small: the same loss and gradients as full-logits cross-entropy, the LM head projecting the
completion only, and freed memory leaving the RSS. The figures are in benchmarks/README ("Training memory")."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from episode_fixtures import make_episode
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

from sotopia_env.training.dataset import build_dataset
from sotopia_env.training.sft import SFTTrainConfig, sft_trainer


class VocabularyProjections:
    """Records the rows of every matrix product whose output is as wide as the vocabulary (the LM head's tiles)."""

    def __init__(self, vocab_size: int) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        rows: list[int] = []

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                if func.overloadpacket.__name__ == "mm" and out.shape[-1] == vocab_size:
                    rows.append(out.shape[0])
                return out

        self.rows = rows
        self.mode = Mode()


def test_sft_loss_and_gradients_are_full_logits_cross_entropy_over_the_completion(tmp_path_factory, tmp_path):
    import torch
    import torch.nn.functional as F

    dataset, _ = build_dataset([make_episode(i, setup_index=i % 2) for i in range(2)])
    config = SFTTrainConfig(
        base_model=tiny_model_spec(tmp_path_factory),
        output_dir=str(tmp_path),
        batch_size=2,
        lora_dropout=0.0,  # both passes below see the same network
        max_length=1024,
        progress=False,
    )
    assert config.gradient_checkpointing  # the default: each layer recomputed in the backward
    trainer, _, _ = sft_trainer(dataset, config, tmp_path / "checkpoints")
    model = trainer.model
    model.train()
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    trained = [p for p in model.parameters() if p.requires_grad]

    # what the trainer computes
    head = VocabularyProjections(model.config.vocab_size)
    with head.mode:
        loss = trainer.compute_loss(model, dict(batch))
        loss.backward()
    grads = [p.grad.clone() for p in trained]
    model.zero_grad()

    # the reference: the whole [batch, length, vocabulary] logits, plain cross-entropy on the completion's labels
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    labels = batch["labels"][:, 1:]
    reference = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), labels.flatten(), ignore_index=-100)
    reference.backward()

    completion = int((labels != -100).sum())
    assert 0 < completion < labels.numel() // 4  # the prompts are most of the batch
    assert loss.item() == pytest.approx(reference.item(), rel=1e-5)
    for got, want in zip(grads, (p.grad for p in trained), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert head.rows and set(head.rows) == {completion}  # the LM head projected the completion's positions only


HEAP_PROBE = textwrap.dedent(
    """
    import sys
    import torch
    from sotopia_env.training.rss import keep_heap_small

    def rss_mb():
        for line in open("/proc/self/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024

    if sys.argv[1] == "keep":
        keep_heap_small()
    big = torch.empty(4 << 20).fill_(1)
    del big  # a freed 16 MiB block: glibc raises its mmap threshold to that size
    before = rss_mb()
    blocks = [torch.empty(512 << 10).fill_(1) for _ in range(64)]  # 64 blocks of 2 MiB, as activations are
    del blocks[:-1]  # all freed but the newest
    print(rss_mb() - before)
    """
)


@pytest.mark.parametrize(("mode", "held_mb"), [("keep", (0, 16)), ("default", (64, 200))])
def test_freed_activations_leave_the_rss(mode, held_mb):
    """The heap keeps freed 2 MiB blocks by default; after ``keep_heap_small`` they go back to the system."""
    probe = subprocess.run([sys.executable, "-c", HEAP_PROBE, mode], capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0, probe.stderr
    low, high = held_mb
    assert low <= float(probe.stdout) <= high


def test_an_adapter_and_its_base_share_the_base_weights(tiny_model_dir, tmp_path):
    """An evaluation plays the trained adapter against its base model: one copy of the base weights, not two, and
    the base plays as itself (the adapter is not merged into the weights they share)."""
    import json

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from sotopia_env.backends.local import LocalBackend

    torch.manual_seed(1)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    trained = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_dir), lora).eval()
    trained.save_pretrained(str(tmp_path / "adapter"))
    (tmp_path / "sotopia_model.json").write_text(json.dumps({"base": str(tiny_model_dir), "adapter": "adapter"}))

    policy = LocalBackend.from_spec(str(tmp_path))  # the policy first, as the pipeline's evaluation loads them
    partner = LocalBackend.from_spec(str(tiny_model_dir))
    under_lora = policy.lm.get_base_model().model.layers[0].self_attn.q_proj.base_layer.weight
    assert under_lora is partner.lm.model.layers[0].self_attn.q_proj.weight
    assert policy.lm.get_base_model().model.embed_tokens.weight is partner.lm.model.embed_tokens.weight

    ids = torch.tensor([[5, 9, 30, 41, 7]])
    with torch.no_grad():
        plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir)(ids).logits
        torch.testing.assert_close(partner.lm(ids).logits, plain)
        torch.testing.assert_close(policy.lm(ids).logits, trained(ids).logits, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(policy.lm(ids).logits, plain, atol=1e-4)
    policy.close()
    partner.close()
