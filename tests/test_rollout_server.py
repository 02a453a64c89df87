"""Episode GRPO's rollouts through a server (``rollout_server``, ``training.served_policy``), against
``tests/vllm_lora_stand_in.py``: a real loopback server with vLLM's routes that generates with transformers (vLLM
itself needs a GPU). What is checked is ours: the prompt ids, the sampled ids, temperature and adapter line up
between the server and the trainer; each step is played with that step's adapter."""

from __future__ import annotations

import asyncio
import json
import shlex
import sys
from pathlib import Path

import pytest
import torch
from test_episode_grpo import _config
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

from sotopia_env.actions import action_json_schema
from sotopia_env.backends.base import ChatRequest
from sotopia_env.evaluators import (
    GOAL_ONLY,
    AgentRating,
    DimensionScore,
    EpisodeRating,
    SyncFromAsync,
    register_evaluator,
    unregister_evaluator,
)
from sotopia_env.training.episode_grpo import EpisodeGRPOConfig, score_served, train_episode_grpo
from sotopia_env.training.episode_rollouts import sample_of
from sotopia_env.training.policy_server import PolicyServer, PolicyServerError
from sotopia_env.training.served_policy import RolloutServerConfig, ServedPolicyBackend

STAND_IN = Path(__file__).resolve().parent / "vllm_lora_stand_in.py"


def stand_in(record: Path, *flags: str) -> RolloutServerConfig:
    """The default command, with the stand-in in place of ``vllm``."""
    python = shlex.quote(sys.executable)
    command = RolloutServerConfig().command.replace("vllm ", f"{python} {STAND_IN} ", 1)
    return RolloutServerConfig(
        command=f"{command} --record {shlex.quote(str(record))} {' '.join(flags)}",
        health_url="http://127.0.0.1:{port}/health",
        start_timeout=120,
        stop_timeout=5,
    )


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _random_adapter(spec: str, folder: Path):
    """A LoRA whose weights are not zero (so serving the wrong one shows), saved to ``folder``."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(spec, dtype=torch.float32)
    lora = LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", init_lora_weights=False, task_type="CAUSAL_LM")
    model = get_peft_model(model, lora).eval()
    model.save_pretrained(str(folder))
    return model


def test_served_turns_carry_the_sampler_logprobs_and_the_trainer_scores_the_same_ids(tmp_path, tmp_path_factory):
    from transformers import AutoTokenizer

    from sotopia_env.model_ref import write_model_ref

    spec = tiny_model_spec(tmp_path_factory)
    tokenizer = AutoTokenizer.from_pretrained(spec)
    model = _random_adapter(spec, tmp_path / "policy")
    write_model_ref(tmp_path / "policy", spec, ".", "")
    messages = [{"role": "system", "content": "You are Ana."}, {"role": "user", "content": "Say hello to Ben."}]
    plain = [ChatRequest(messages, temperature=0.7, max_new_tokens=12, seed=s) for s in range(4)]
    schema = action_json_schema()
    constrained = [
        ChatRequest(messages, json_schema=schema, temperature=0.7, max_new_tokens=24, seed=s) for s in (7, 8)
    ]
    config = EpisodeGRPOConfig(temperature=0.7)
    record = tmp_path / "record.jsonl"
    with PolicyServer(stand_in(record), str(tmp_path / "policy"), tmp_path / "server.log") as server:
        backend = ServedPolicyBackend(server.api_base, "policy", tokenizer)
        out = asyncio.run(backend.generate(plain + constrained))
        missing = asyncio.run(ServedPolicyBackend(server.api_base, "no-such-adapter", tokenizer).generate(plain[:1]))
    assert all(c.ok for c in out), [c.error for c in out]
    samples = [sample_of(c) for c in out]
    assert all(s.logprobs is None for s in samples)  # the server's are the sampler's; the trainer scores them
    score_served(model, samples, config)
    for sample in samples[: len(plain)]:  # no mask: the sampler is the policy at the temperature
        assert sample.prompt_ids == tokenizer(tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                              tokenize=False), add_special_tokens=False)["input_ids"]  # fmt: skip
        assert sample.logprobs == pytest.approx(sample.sampler_logprobs, abs=1e-3)
    for completion, sample in zip(out[len(plain) :], samples[len(plain) :], strict=True):
        assert completion.text.startswith('{"action_type": "')  # the grammar, compact (may be cut at max_tokens)
        gaps = [s - p for s, p in zip(sample.sampler_logprobs, sample.logprobs, strict=True)]
        assert min(gaps) > -1e-3 and max(gaps) > 0.01  # the mask only removes mass, and it removed some
    assert missing[0].error is not None and "404" in missing[0].error and "no-such-adapter" in missing[0].error


class ArgumentLength(SyncFromAsync):
    """A judge the tiny model's random replies can please: its goal is the length of the first seat's words modulo 11
    (so that groups differ and every step trains)."""

    name = "argument-length"

    def __init__(self, dimensions=GOAL_ONLY) -> None:
        self.dimensions = GOAL_ONLY

    async def aevaluate(self, context) -> EpisodeRating:
        first = context.setup.agent_names[0]
        said = sum(len(t.action.argument) for t in context.turns if t.agent == first)
        rated = {n: AgentRating(scores={"goal": DimensionScore(score=said % 11 if n == first else 0,
                                                             reasoning=f"{said} characters")})
                 for n in context.setup.agent_names}  # fmt: skip
        return EpisodeRating(evaluator=self.name, ratings=rated)


@pytest.fixture
def argument_length():
    register_evaluator(ArgumentLength.name, ArgumentLength)
    yield ArgumentLength.name
    unregister_evaluator(ArgumentLength.name)


def _lora_weights(folder: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def test_each_step_plays_on_the_server_with_that_steps_adapter(tmp_path, tmp_path_factory, argument_length):
    spec = tiny_model_spec(tmp_path_factory)
    record = tmp_path / "record.jsonl"
    server = stand_in(record, "--close-strings")
    config = _config(tmp_path, spec, rollout_server=server, evaluator=argument_length, max_steps=3,
                     max_completion_length=40, group_size=3, beta=0.0, save_total_limit=3)  # fmt: skip
    result = train_episode_grpo(config)
    assert result.steps == 3 and all(row["unrated"] == 0 and row["episodes"] == 3 for row in result.log)
    assert all(row["trained_sequences"] > 0 for row in result.log), result.log  # every step trained
    events = _records(record)
    started, rest = events[0], events[1:]
    assert started["runtime_lora"] == "True"  # the server may load adapters while it runs
    adapters = tmp_path / "rl" / "rollout_adapters"
    assert f"policy={adapters / 'step-1'}" in started["argv"]
    loads = [e for e in rest if "loaded" in e]
    assert [(e["loaded"], e["path"]) for e in loads] == [
        (f"policy-step-{n}", str((adapters / f"step-{n}").resolve())) for n in (2, 3)
    ]
    assert [e["unloaded"] for e in rest if "unloaded" in e] == ["policy-step-2"]
    served = [e["model"] for e in rest if "model" in e]
    assert served == sorted(served, key=["policy", "policy-step-2", "policy-step-3"].index)  # step by step
    assert set(served) == {"policy", "policy-step-2", "policy-step-3"}
    # step 3 was played with the adapter as step 2 left it, not as it started
    last, after_two = _lora_weights(adapters / "step-3"), _lora_weights(tmp_path / "rl" / "checkpoints" / "step-2")
    first = _lora_weights(adapters / "step-1")
    assert last.keys() == after_two.keys() == first.keys()
    assert all(torch.equal(last[k], after_two[k]) for k in last)
    assert any(not torch.equal(last[k], first[k]) for k in last)
    for row in result.log:  # the grammar mask and nothing else: server and trainer agree where it lets through
        assert 0 < row["is_weight"] <= 1.0 + 1e-3 and abs(row["approx_kl"]) < 1e-4, row


def test_the_gpu_example_and_bad_rollout_server_settings_are_read_with_one_line_errors(tmp_path, tmp_path_factory):
    from sotopia_env.training.config import ConfigError, load_rl_config, parse_rl_config

    example = load_rl_config(Path(__file__).resolve().parents[1] / "examples" / "grpo-episodes-7b-gpu.yaml")
    assert isinstance(example.rollout_server, RolloutServerConfig)
    assert {"--enable-lora", "--logprobs-mode", "processed_logprobs"} <= set(example.rollout_server.command.split())
    with pytest.raises(ConfigError, match=r"x\.yaml: field 'rollout_server\.comand'"):
        parse_rl_config({"task": "episodes", "rollout_server": {"comand": "vllm"}}, "x.yaml")
    with pytest.raises(ValueError, match=r"rollout_server\.command: bad template"):
        EpisodeGRPOConfig(rollout_server=RolloutServerConfig(command="vllm serve {base_modle} --port {port}"))
    spec = tiny_model_spec(tmp_path_factory)
    missing = RolloutServerConfig(command="no-such-vllm serve {base_model} {adapter} --port {port}")
    with pytest.raises(PolicyServerError, match=r"cannot run 'no-such-vllm'.*rollout_server\.command"):
        train_episode_grpo(_config(tmp_path, spec, rollout_server=missing, max_steps=1))
