"""The TRL environment (``training.trl_env``): tool-call warm-start data, and GRPO steps through
``GRPOTrainer(environment_factory=...)`` with the embedded model against the rule partner."""

from __future__ import annotations

import math
import os

import pytest

pytest.importorskip("trl")

from sotopia_env.evaluators import (  # noqa: E402
    EpisodeContext,
    evaluate_safely,
    make_evaluator,  # noqa: E402
)
from sotopia_env.training.seat_rows import SessionMaker, seat_rows, trl_dataset  # noqa: E402
from sotopia_env.training.trl_env import (  # noqa: E402
    expert_tool_dataset,
    tool_chat_template,
    tool_env_factory,
    tool_transcripts,
)


def test_expert_tool_conversations_train_on_the_tool_calls_only(embedded_model_path):
    from transformers import AutoTokenizer

    rows = seat_rows("bargaining:train")[:2]
    transcripts = tool_transcripts(rows)
    assert len(transcripts) == 2  # the expert wins both
    calls = [m for m in transcripts[0] if m["role"] == "assistant" and m.get("tool_calls")]
    answers = [m["content"] for m in transcripts[0] if m["role"] == "tool"]
    assert calls and len(answers) == len(calls) and "The episode is over" in answers[-1]
    tokenizer = tool_chat_template(AutoTokenizer.from_pretrained(embedded_model_path))
    data = expert_tool_dataset(transcripts, tokenizer)
    ids, mask = data[0]["input_ids"], data[0]["assistant_masks"]
    trained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert trained.count("<tool_call>") == len(calls) and '"name": "speak"' in trained
    assert not any(answer[:40] in trained for answer in answers)  # the partner's words are never trained
    first = expert_tool_dataset(transcripts, tokenizer, max_moves=1)
    assert (
        len(first[0]["input_ids"]) < len(ids)
        and tokenizer.decode(
            [i for i, m in zip(first[0]["input_ids"], first[0]["assistant_masks"], strict=True) if m]
        ).count("<tool_call>")
        == 1
    )


def shorter_is_better(completions, **_):
    """An auxiliary reward with spread: the untrained 135M model calls no tool, so every episode of a group ends
    alike and the judge's rewards alone carry no advantage."""
    return [-len(str(c)) / 1000 for c in completions]


@pytest.mark.model
def test_two_grpo_steps_rewards_are_the_judges(embedded_model_path, tmp_path):
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    tokenizer = tool_chat_template(AutoTokenizer.from_pretrained(embedded_model_path))
    model = AutoModelForCausalLM.from_pretrained(embedded_model_path, dtype=torch.float32)
    maker = SessionMaker()
    rows = seat_rows("verifiable:train", library=maker.library)[::12]  # two kinds
    episodes = []
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=2, learning_rate=1e-3, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=24, temperature=1.0, beta=0.0, max_tool_calling_iterations=2, logging_steps=1,
        report_to="none", save_strategy="no", disable_tqdm=True, bf16=False, seed=0,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[shorter_is_better],
        args=args,
        train_dataset=trl_dataset(rows, maker),
        processing_class=tokenizer,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
        environment_factory=tool_env_factory(maker, on_episode=lambda log, reward: episodes.append((log, reward))),
    )
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    trainer.train()

    assert len(episodes) == 4  # two steps of one group of two
    logged = list(trainer._logs["rewards"]["SocialToolEnv"])  # TRL keeps the last step's, per rollout
    assert logged == [reward for _, reward in episodes[-len(logged) :]]
    means = [
        row["rewards/SocialToolEnv/mean"] for row in trainer.state.log_history if "rewards/SocialToolEnv/mean" in row
    ]
    assert means == pytest.approx([(episodes[0][1] + episodes[1][1]) / 2, (episodes[2][1] + episodes[3][1]) / 2])
    judge = make_evaluator("verifiable", "goal")
    for log, reward in episodes:
        assert log is not None and log.setup.scenario.verifiable is not None
        context = EpisodeContext(setup=log.setup, turns=log.turns, termination_reason=log.termination_reason or "")
        again = evaluate_safely(judge, context).reward(log.setup.agent_names[0], "goal")
        assert reward == again and not math.isnan(reward)
    after = dict(trainer.model.named_parameters())
    assert any(not torch.equal(before[n], after[n].detach()) for n in before)  # the adapter changed
