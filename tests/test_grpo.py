"""GRPO (training.grpo) on CPU with a tiny random model: the built-in tasks, reward plumbing, None rewards,
resume, the ``train grpo`` CLI and bad input. Each run is two or three steps of two completions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_training_tiny import one_torch_thread  # noqa: F401
from typer.testing import CliRunner

from sotopia_env.training.grpo import GRPOStageConfig, train_grpo
from sotopia_env.training.rl import RLTask, TaskError, build_task, register_task, task_names

ROOT = Path(__file__).resolve().parents[1]
SOCIALIQA = ROOT / "examples" / "data" / "socialiqa-tiny.jsonl"
ITEMS = ROOT / "tests" / "data" / "item_selection_tiny.jsonl"
DATA = {"socialiqa": SOCIALIQA, "social_r1": SOCIALIQA, "item_selection": ITEMS}


def _config(tmp_path: Path, model: Path | str, task: str = "socialiqa", **kw) -> GRPOStageConfig:
    settings = dict(
        task=task, data=str(DATA.get(task, SOCIALIQA)), max_items=2, base_model=str(model),
        output_dir=str(tmp_path / "grpo"), num_generations=2, batch_size=2, max_completion_length=8,
        max_steps=2, learning_rate=1e-2, beta=0.04, save_steps=1, progress=False, seed=0,
    )  # fmt: skip
    return GRPOStageConfig(**{**settings, **kw})


def test_built_in_tasks_give_chat_prompts_and_rewards_that_read_their_columns():
    assert {"socialiqa", "social_r1", "item_selection"} <= set(task_names())
    qa = build_task("socialiqa", str(SOCIALIQA))
    assert len(qa.dataset) == 8 and qa.dataset[0]["prompt"][0]["role"] == "user"
    right = (
        "<think>Alex works there, so Alex walks Robin as part of the job.</think><answer>(A) work at the jail</answer>"
    )
    wrong = "<think>Robin is hungry.</think><answer>(B) So Robin can eat</answer>"
    fmt, answer = qa.rewards
    prompts = [qa.dataset[0]["prompt"]] * 3
    assert answer(prompts, [right, wrong, "no answer"], label=["1", "1", "1"]) == [2.0, -2.0, -3.0]
    assert fmt(prompts, [right, wrong, "no answer"]) == [1.0, 1.0, -1.0]

    r1 = build_task("social_r1", str(SOCIALIQA), max_items=3)
    assert len(r1.dataset) == 3
    scores = r1.rewards[0](prompts[:2], [right, "no answer"], label=["1", "1"])
    assert scores[0] is not None and scores[0] >= 1.0 and scores[1] == 0.0

    items = build_task("item_selection", str(ITEMS))
    row = items.dataset[2]
    assert "(C) Coffee grinder" in row["prompt"][0]["content"] and row["answer_index"] == 2
    reward = items.rewards[0]
    got = reward(
        [row["prompt"]] * 3, ["C", "Coffee grinder", "c"], candidates=[row["candidates"]] * 3, answer_index=[2] * 3
    )
    assert got == [1.0, 1.0, 0.0]


def test_social_r1_gives_none_when_the_judge_cannot_rate():
    from sotopia_env.training.rewards.sip_judges import JudgeError
    from sotopia_env.training.rl.builtin import make_social_r1_task_reward

    class Failing:
        def judge(self, context: str, reasoning: str):
            raise JudgeError("judge down")

    reward = make_social_r1_task_reward(judge=Failing())
    ok = "<think>She is upset and wants help.</think><answer>(A) work at the jail</answer>"
    assert reward(["q", "q"], [ok, "not formatted"], label=["1", "1"]) == [None, 0.0]


@pytest.mark.parametrize("task", ["socialiqa", "social_r1", "item_selection"])
def test_two_grpo_steps_on_each_task_leave_a_model_spec(task, tmp_path, tiny_model_dir):
    result = train_grpo(_config(tmp_path, tiny_model_dir, task, save_steps=50))
    assert result.steps == 2 and result.task == task and result.prompts == 2
    assert result.placement == "cpu float32"  # TRL placed it: no GPU here
    out = Path(result.model_dir)
    ref = json.loads((out / "sotopia_model.json").read_text())
    assert ref["adapter"] == "adapter" and (out / "adapter" / "adapter_model.safetensors").is_file()
    steps = [h for h in result.log if "reward" in h]
    assert len(steps) == 2
    for h in steps:  # TRL's per-step log: rewards per function, KL, clipping, zero-std groups; our None counts
        assert {"kl", "completions/mean_length", "reward_std", "frac_reward_zero_std", "entropy"} <= set(h)
        assert any(k.startswith("clip_ratio") for k in h)
        assert any(k.startswith("rewards/") and k.endswith("/none") for k in h)
    assert result.zero_std_share == pytest.approx(sum(h["frac_reward_zero_std"] for h in steps) / 2, abs=1e-4)
    saved = json.loads((out / "grpo_result.json").read_text())
    assert saved["steps"] == 2 and saved["none_rewards"] == 0


@pytest.mark.parametrize("local", [True, False], ids=["local-rollouts", "trl-generate"])
def test_completions_come_from_the_local_backend_unless_turned_off(tmp_path, tiny_model_dir, monkeypatch, local):
    """The rollouts go through the backend's scheduler (TRL's own generate when ``local_rollouts`` is off): each
    prompt of the group once per completion, at the trainer's temperature, recording what was sampled, and TRL
    trains on those very ids (its logged completion lengths are theirs)."""
    from sotopia_env.backends.local import LocalBackend

    calls: list[tuple[list, list]] = []
    real = LocalBackend.generate_now

    def recorded(self, requests):
        outs = real(self, requests)
        calls.append((requests, outs))
        return outs

    monkeypatch.setattr(LocalBackend, "generate_now", recorded)
    result = train_grpo(_config(tmp_path, tiny_model_dir, temperature=0.8, local_rollouts=local))
    assert result.steps == 2
    if not local:
        assert calls == []
        return
    assert len(calls) == 2
    steps = [h for h in result.log if "reward" in h]
    for (requests, outs), logged in zip(calls, steps, strict=True):
        assert len(requests) == 2 and requests[0].messages == requests[1].messages  # a group of two
        assert all(r.logprobs and r.temperature == 0.8 and r.max_new_tokens == 8 for r in requests)
        assert requests[0].seed != requests[1].seed
        lengths = [len(out.meta["token_ids"]) for out in outs]
        assert logged["completions/mean_length"] == pytest.approx(sum(lengths) / len(lengths))


def _column_task(seen: list, nones: str):
    """A task registered from the test: its reward records the columns it gets and returns None as told
    (``half``: every other completion; ``after-first``: every completion after the first batch)."""
    from datasets import Dataset

    words = "xyzw"
    rows = [
        {"prompt": [{"role": "user", "content": f"Say {w}."}], "target": w, "weight": i} for i, w in enumerate(words)
    ]

    def target_reward(prompts, completions, *, target, weight, **columns):
        seen.append((list(target), list(weight), [p[0]["content"] for p in prompts]))
        scores = [float(i % 2) for i in range(len(completions))]  # a group's two completions always differ
        if nones == "after-first":
            return scores if len(seen) == 1 else [None] * len(completions)
        return [None if i % 2 else score for i, score in enumerate(scores)]

    @register_task(f"test-columns-{nones}")
    def build(data, max_items):
        return RLTask(f"test-columns-{nones}", Dataset.from_list(rows[:max_items]), [target_reward])


def test_dataset_columns_reach_the_rewards_and_none_rewards_are_counted(tmp_path, tiny_model_dir):
    seen: list = []
    _column_task(seen, "half")
    result = train_grpo(_config(tmp_path, tiny_model_dir, "test-columns-half", data=None, max_items=4))
    assert len(seen) == 2
    for targets, weights, prompts in seen:
        assert len(targets) == 2 and targets[0] == targets[1]  # the group: one prompt, two completions
        assert prompts[0] == f"Say {targets[0]}." and weights[0] == "xyzw".index(targets[0])
    assert result.none_rewards == 2 and result.unscorable_batches == 0
    assert [h["rewards/target_reward/none"] for h in result.log if "reward" in h] == [1.0, 1.0]


def test_a_step_where_every_reward_is_none_is_skipped_and_counted(tmp_path, tiny_model_dir):
    from safetensors.torch import load_file

    seen: list = []
    _column_task(seen, "after-first")
    config = _config(
        tmp_path, tiny_model_dir, "test-columns-after-first", data=None, max_items=4, max_steps=3, save_total_limit=3
    )
    result = train_grpo(config)
    assert result.steps == 3 and result.unscorable_batches == 2 and result.none_rewards == 4
    assert result.rewards[0] is not None and result.rewards[1:] == [None, None]
    after_first = load_file(str(Path(config.output_dir) / "checkpoints" / "checkpoint-1" / "adapter_model.safetensors"))
    final = load_file(str(Path(result.model_dir) / "adapter" / "adapter_model.safetensors"))
    assert any(float(t.abs().max()) > 0 for k, t in after_first.items() if "lora_B" in k)  # step 1 learned
    # steps 2 and 3 moved nothing: not the KL term's gradient, not the optimizer's momentum
    assert after_first.keys() == final.keys() and all((after_first[k] == final[k]).all() for k in final)


def test_resume_from_the_last_checkpoint(tmp_path, tiny_model_dir):
    first = train_grpo(_config(tmp_path, tiny_model_dir, max_steps=2))
    assert first.resumed_from is None and (Path(first.model_dir) / "checkpoints" / "checkpoint-2").is_dir()
    second = train_grpo(_config(tmp_path, tiny_model_dir, max_steps=3))
    assert second.resumed_from is not None and second.resumed_from.endswith("checkpoint-2")
    assert second.steps == 3 and len([h for h in second.log if "reward" in h]) == 3


def test_continue_a_trained_adapter(tmp_path, tiny_model_dir):
    first = train_grpo(_config(tmp_path / "a", tiny_model_dir, max_steps=2, save_steps=50))
    config = _config(tmp_path / "b", first.model_dir, max_steps=2, save_steps=50)
    second = train_grpo(config)
    # TRL >= 0.27 takes the KL towards a frozen "ref" copy of the continued adapter: it starts at 0
    assert [h for h in second.log if "kl" in h][0]["kl"] == pytest.approx(0.0, abs=1e-6)
    ref = json.loads((Path(second.model_dir) / "sotopia_model.json").read_text())
    assert ref["base"] == str(Path(tiny_model_dir).resolve()) and second.steps == 2


def test_cli_train_grpo_and_its_one_line_errors(tmp_path, tiny_model_dir):
    import yaml

    from sotopia_env.cli.main import app

    runner = CliRunner()
    config = _config(tmp_path, tiny_model_dir, save_steps=50)
    keys = "task data max_items base_model output_dir num_generations batch_size max_completion_length max_steps"
    raw = {k: getattr(config, k) for k in keys.split()}
    path = tmp_path / "grpo.yaml"
    path.write_text(yaml.safe_dump(raw))
    result = runner.invoke(app, ["train", "grpo", str(path), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "grpo (socialiqa: 2 prompts)" in result.output and "None rewards: 0" in result.output
    assert (Path(config.output_dir) / "sotopia_model.json").is_file()

    for bad, expected in (
        ({**raw, "num_generation": 2}, "field 'num_generation'"),
        ({**raw, "num_generations": 3}, "multiple of num_generations"),
        ({**raw, "task": "nope"}, "unknown RL task 'nope'"),
    ):
        path.write_text(yaml.safe_dump(bad))
        result = runner.invoke(app, ["train", "grpo", str(path), "--quiet"])
        assert result.exit_code != 0 and expected in result.output, result.output
        assert "Traceback" not in result.output and str(path) in result.output or "unknown RL task" in result.output


@pytest.mark.parametrize(
    ("task", "line", "expected"),
    [
        ("item_selection", '{"prompt": "p", "candidates": ["a"], "answer_index": 3}', "answer_index 3 is out of range"),
        ("item_selection", '{"prompt": "p", "candidates": ["a"],', "malformed JSON"),
        ("socialiqa", '{"context": "c", "question": "q", "answerA": "a", "answerB": "b", "answerC": "c"}', "label"),
    ],
)
def test_a_malformed_row_is_one_line_naming_file_and_line(task, line, expected, tmp_path):
    good = (ITEMS if task == "item_selection" else SOCIALIQA).read_text().splitlines()[0]
    path = tmp_path / "data.jsonl"
    path.write_text(f"{good}\n\n{line}\n")
    with pytest.raises(TaskError) as info:
        build_task(task, str(path))
    message = str(info.value)
    assert message.startswith(f"{path}:3: ") and expected in message and "\n" not in message


def test_missing_data_and_empty_tasks_are_errors(tmp_path):
    with pytest.raises(TaskError, match="needs a data file"):
        build_task("socialiqa")
    with pytest.raises(TaskError, match="cannot read file"):
        build_task("item_selection", str(tmp_path / "missing.jsonl"))
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(TaskError, match="dataset is empty"):
        build_task("item_selection", str(tmp_path / "empty.jsonl"))


@pytest.mark.model
def test_smollm2_grpo_steps_on_socialiqa(tmp_path, embedded_model_path):
    config = _config(tmp_path, "smollm2-135m", max_steps=1, max_completion_length=16, learning_rate=5e-6, save_steps=50)
    result = train_grpo(config)
    assert result.steps == 1 and len(result.rewards) == 1
    assert all(r is not None and -4.0 <= r <= 3.0 for r in result.rewards)  # format + answer rewards, summed
