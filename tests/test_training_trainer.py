"""The trainer: precision choices, LoRA and full fine-tunes that the local backend loads, resuming, continuing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from episode_fixtures import make_episode
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

from sotopia_env.model_ref import MODEL_REF, read_model_ref
from sotopia_env.training.dataset import build_dataset
from sotopia_env.training.sft import SFTTrainConfig, decide_precision, train_sft


@pytest.fixture(scope="module")
def dataset():
    data, _ = build_dataset([make_episode(i, setup_index=i % 2) for i in range(2)])
    return data


def _config(tmp_path_factory, out: Path, **kw) -> SFTTrainConfig:
    base = dict(learning_rate=5e-3, batch_size=2, max_steps=2, save_steps=2, max_length=1024, progress=False)
    base["base_model"] = tiny_model_spec(tmp_path_factory)
    return SFTTrainConfig(output_dir=str(out), **(base | kw))


def test_precision_follows_the_hardware_unless_told():
    from sotopia_env.training.model_setup import cpu_bf16_native

    # CPU: bf16 autocast only where the CPU computes bf16 natively; never QLoRA
    assert decide_precision(SFTTrainConfig()) == (cpu_bf16_native(), False)
    assert decide_precision(SFTTrainConfig(bf16=False)) == (False, False)
    with pytest.raises(ValueError, match="CUDA"):
        decide_precision(SFTTrainConfig(qlora=True))
    with pytest.raises(ValueError, match="full_finetune"):
        SFTTrainConfig(full_finetune=True, init_adapter="x")
    with pytest.raises(ValueError, match="lora_r"):
        SFTTrainConfig(lora_r=0)


def test_cpu_bf16_caps_onednn_shape_caches_unless_the_environment_does(monkeypatch):
    """bf16 products cache a compiled primitive per shape; uncapped, episode GRPO's RSS grew 1.2 GB in 8 steps."""
    from sotopia_env.training.model_setup import ONEDNN_CACHE_VARIABLES

    names = ONEDNN_CACHE_VARIABLES
    assert names == ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")  # the names oneDNN and ideep read
    for name in names:
        monkeypatch.delenv(name, raising=False)
    decide_precision(SFTTrainConfig(bf16=False))
    assert [os.environ.get(name) for name in names] == [None, None]  # fp32 products do not use them
    monkeypatch.setenv("LRU_CACHE_CAPACITY", "7")
    decide_precision(SFTTrainConfig(bf16=True))
    assert [os.environ.get(name) for name in names] == ["128", "7"]


def test_empty_dataset_is_refused(tmp_path_factory, tmp_path, dataset):
    with pytest.raises(ValueError, match="empty"):
        train_sft(dataset.select([]), _config(tmp_path_factory, tmp_path))


def test_lora_run_resumes_from_its_checkpoint_and_loads_in_the_local_backend(tmp_path_factory, tmp_path, dataset):
    from sotopia_env.backends.local import LocalBackend

    first = train_sft(dataset, _config(tmp_path_factory, tmp_path))  # "interrupted" after 2 steps
    assert first.steps == 2 and len(first.losses) == 2 and first.resumed_from is None
    again = train_sft(dataset, _config(tmp_path_factory, tmp_path, max_steps=4))
    assert again.resumed_from and again.resumed_from.endswith("checkpoint-2")
    assert again.steps == 4 and again.losses[:2] == first.losses and len(again.losses) == 4
    ref = json.loads((tmp_path / MODEL_REF).read_text())
    assert ref == {"base": str(Path(tiny_model_spec(tmp_path_factory)).resolve()), "adapter": "adapter"}
    assert read_model_ref(tmp_path)[1] == str((tmp_path / "adapter").resolve())
    assert json.loads((tmp_path / "train_result.json").read_text())["losses"] == again.losses
    backend = LocalBackend.from_spec(str(tmp_path))
    assert backend.model.endswith("adapter")
    backend.close()


def test_continuing_training_starts_from_the_adapter(tmp_path_factory, tmp_path, dataset):
    from safetensors.torch import load_file

    bc = train_sft(dataset, _config(tmp_path_factory, tmp_path / "bc", max_steps=3))
    base, adapter = read_model_ref(bc.model_dir)
    # a learning rate too small to move anything: the continued adapter must equal the one it started from
    train_sft(
        dataset,
        _config(
            tmp_path_factory, tmp_path / "sr", base_model=base, init_adapter=adapter, learning_rate=1e-12, max_steps=1
        ),
    )
    before = load_file(str(tmp_path / "bc" / "adapter" / "adapter_model.safetensors"))
    after = load_file(str(tmp_path / "sr" / "adapter" / "adapter_model.safetensors"))
    assert before.keys() == after.keys()
    lora_b = [k for k in before if "lora_B" in k]
    assert lora_b and any(before[k].abs().max() > 0 for k in lora_b)  # trained, not a fresh (zero) LoRA B
    assert all((before[k] - after[k]).abs().max() < 1e-6 for k in before)


def test_full_finetune_saves_a_plain_model_dir(tmp_path_factory, tmp_path, dataset):
    from sotopia_env.backends.local import LocalBackend

    result = train_sft(dataset, _config(tmp_path_factory, tmp_path, full_finetune=True, max_steps=1))
    assert (tmp_path / "config.json").is_file() and list(tmp_path.glob("*.safetensors"))
    assert not (tmp_path / MODEL_REF).exists()
    LocalBackend.from_spec(result.model_dir).close()
