"""GRPO on whole episodes (training.episode_grpo, ``task: episodes``) on CPU with a tiny random model: the estimator's
contract (sampled ids, the same distribution, credit, the reference), the signal (advantages, starts, dense
reward), steps and resume, unrated episodes, the pipeline and the CLI."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from test_training_tiny import one_torch_thread, tiny_model_spec  # noqa: F401

from sotopia_env.backends.base import Completion, GenerationSettings
from sotopia_env.backends.scripted import ScriptedBackend
from sotopia_env.env import EnvConfig
from sotopia_env.evaluators import RuleBasedEvaluator
from sotopia_env.prompt import prompt_text
from sotopia_env.rewards import Reward
from sotopia_env.training.episode_grpo import (
    EpisodeGRPOConfig,
    group_advantages,
    pack,
    policy_loss,
    shuffled_within_groups,
    step_advantages,
    token_logprobs,
    train_episode_grpo,
)
from sotopia_env.training.episode_rollouts import Rollout, Sample, StartPicker, interleaved, play_one

POLICY_LINES = ["I would love some help with the garden.", "Thanks, that settles it."]


class IdsBackend:
    """A scripted backend that also fills in what a local backend records (test double): the prompt and reply
    tokenised, with made-up log-probabilities."""

    def __init__(self, replies: list, tokenizer) -> None:
        self.inner = ScriptedBackend(replies)
        self.model = "scripted"
        self.tokenizer = tokenizer
        self.requests = self.inner.requests

    async def generate(self, requests) -> list[Completion]:
        out = await self.inner.generate(requests)
        for request, completion in zip(requests, out, strict=True):
            if completion.ok:
                ids = self.tokenizer(completion.text, add_special_tokens=False)["input_ids"]
                prompt = prompt_text(request.messages, self.tokenizer)
                completion.meta.update(
                    prompt_ids=self.tokenizer(prompt, add_special_tokens=False)["input_ids"],
                    token_ids=ids, logprobs=[-1.0] * len(ids), sampler_logprobs=[-1.0] * len(ids),
                )  # fmt: skip
        return out


def _speak(text: str) -> str:
    return json.dumps({"action_type": "speak", "argument": text})


def _tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_spec(tmp_path_factory))


def _verifiable_setup(kind: str):
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setups

    library = load_library()
    chosen = [s for s in library.select("verifiable:train") if s.verifiable is not None and s.verifiable.kind == kind]
    scenario = sorted(chosen, key=lambda s: s.id)[0]
    return sample_setups([scenario], library, 1, seed=0)[0]


def _rollout(setup, **kw) -> Rollout:
    from sotopia_env.evaluators import make_evaluator

    settings = dict(
        setups=[setup], seat=0, partner="rule-partner", evaluator=make_evaluator("verifiable", "goal"),
        env=EnvConfig(max_turns=4), settings=GenerationSettings(max_new_tokens=32),
    )  # fmt: skip
    return Rollout(**{**settings, **kw})


# -- advantages and starts ----------------------------------------------------------------------------------------


def test_group_advantage_by_hand_with_an_unrated_episode():
    std = math.sqrt((25 + 25 + 0) / 3)  # rated rewards 10, 0, 5: mean 5, population std
    assert group_advantages([10.0, 0.0, None, 5.0]) == pytest.approx([5 / std, -5 / std, None, 0.0])
    assert group_advantages([3.0, 3.0, None]) == [0.0, 0.0, None]  # equal rewards: no signal
    assert group_advantages([None, 7.0]) == [None, 0.0]  # one rated episode: nothing to compare
    assert group_advantages([None, None]) == [None, None]


def test_batch_scaling_keeps_a_one_point_price_gap_small_next_to_a_win_loss_split():
    groups = [[6.0, 5.0], [10.0, 0.0]]  # graded bargaining: 1 point apart; scheduling: won and lost
    by_group = step_advantages(groups, "group")
    assert by_group[0] == pytest.approx([1.0, -1.0]) == by_group[1]  # the same push for 1 point as for a win
    by_batch = step_advantages(groups, "batch")
    step_std = math.sqrt(sum((r - 5.25) ** 2 for g in groups for r in g) / 4)
    assert by_batch[0] == pytest.approx([0.5 / step_std, -0.5 / step_std])
    assert by_batch[1] == pytest.approx([5 / step_std, -5 / step_std])
    assert step_advantages(groups, "none") == [pytest.approx([0.5, -0.5]), pytest.approx([5.0, -5.0])]


def test_shuffled_rewards_keep_each_group_and_lose_who_earned_what():
    groups = [[float(i) for i in range(8)], [10.0, 0.0, None, 5.0]]
    shuffled = shuffled_within_groups(groups, seed=3)
    assert [sorted(g, key=str) for g in shuffled] == [sorted(g, key=str) for g in groups]  # same rewards per group
    assert shuffled[0] != groups[0]  # an identity "shuffle" would leave the signal in place
    assert shuffled == shuffled_within_groups(groups, seed=3)  # seeded: a resumed run shuffles the same way
    # over many seeds, which episode gets the best reward is uniform: no trace of the real order is left
    firsts = [shuffled_within_groups(groups, seed)[0].index(7.0) for seed in range(800)]
    assert all(80 <= firsts.count(i) <= 120 for i in range(8))


def test_starts_interleave_kinds_and_rest_after_a_group_without_signal():
    library_setups = [_verifiable_setup(k) for k in ("bargaining", "scheduling", "persuasion")] * 2
    order = interleaved(library_setups, seed=0)
    kinds = [library_setups[i].scenario.verifiable.kind for i in order]
    assert kinds[:3] in (["bargaining", "persuasion", "scheduling"],) and sorted(order) == list(range(6))
    picker = StartPicker(order, dynamic=True, revisit_after=2)
    first, skipped = picker.pick(2, step_=1)
    assert first == order[:2] and skipped == 0
    assert picker.record(first[0], 1, [Reward(0.0, False), Reward(0.0, False)]) is False  # all lost
    assert picker.record(first[1], 1, [Reward(10.0, True), Reward(0.0, False)]) is True
    assert picker.success_rate[first[1]] == 0.5
    picker.cursor = 0  # a lap later, the flat start is skipped while it rests, and taken again after
    chosen, skipped = picker.pick(2, step_=2)
    assert first[0] not in chosen and skipped == 1
    picker.cursor = 0
    chosen, skipped = picker.pick(1, step_=4)
    assert chosen == [first[0]] and skipped == 0
    resting_all = StartPicker(order[:1], dynamic=True, revisit_after=5, flat_since={order[0]: 1})
    assert resting_all.pick(1, step_=2)[0] == [order[0]]  # nothing else to take: taken anyway


# -- sampled ids ----------------------------------------------------------------------------------------------------


def test_under_the_grammar_every_training_sequence_is_exactly_the_sampled_ids(tmp_path_factory, monkeypatch):
    """The rows ``generate`` returned are captured; every credited sample's ids are one of them, cut after its
    stop token. Re-tokenising the decoded text (what the old estimator trained on) gives other ids for some."""
    from concurrent.futures import ThreadPoolExecutor

    from transformers import AutoModelForCausalLM

    from sotopia_env.backends.local import LocalBackend
    from sotopia_env.training.episode_rollouts import play_many, policy_backend

    spec = tiny_model_spec(tmp_path_factory)
    tokenizer = _tokenizer(tmp_path_factory)
    rows: list[list[int]] = []
    completion = LocalBackend._completion

    def capture(self, tokens, *args, **kwargs):
        rows.append(list(tokens))
        return completion(self, tokens, *args, **kwargs)

    monkeypatch.setattr(LocalBackend, "_completion", capture)
    model = AutoModelForCausalLM.from_pretrained(spec).eval()
    setups = [_verifiable_setup(k) for k in ("bargaining", "scheduling", "persuasion")]
    rollout = _rollout(setups[0], settings=GenerationSettings(temperature=1.0, max_new_tokens=64), constrained=True)
    with ThreadPoolExecutor(1) as thread:
        backend = policy_backend(model, tokenizer, "tiny", 8, thread)
        starts = [(setup, seed) for setup in setups for seed in (1, 2, 3, 4)]
        episodes = asyncio.run(play_many(rollout, backend, starts))
    stop_ids = {tokenizer.eos_token_id}
    sampled = []
    for row in rows:
        end = next((k for k, t in enumerate(row) if t in stop_ids), None)
        sampled.append(row if end is None else row[: end + 1])
    samples = [s for e in episodes for s in e.samples]
    assert len(samples) >= 6
    retokenised_differently = 0
    for sample in samples:
        assert sample.completion_ids in sampled
        assert len(sample.logprobs) == len(sample.sampler_logprobs) == len(sample.completion_ids)
        body = sample.completion_ids[:-1] if sample.completion_ids[-1] in stop_ids else sample.completion_ids
        text = tokenizer.decode(body, skip_special_tokens=True)
        retokenised_differently += tokenizer(text, add_special_tokens=False)["input_ids"] != body
    assert retokenised_differently > 0  # the old estimator's sequences were not what the policy sampled


# -- credit and reward ---------------------------------------------------------------------------------------------


def test_retries_and_moves_after_the_outcome_was_decided_get_no_gradient(tmp_path_factory):
    tokenizer = _tokenizer(tmp_path_factory)
    setup = _verifiable_setup("bargaining")
    offer = _speak(f"I can pay ${setup.scenario.verifiable.reservation_range[1]} for it.")  # above any drawn floor
    after = _speak("Thank you, it is a deal then.")
    backend = IdsBackend(["not json at all", offer, after], tokenizer)
    episode = asyncio.run(play_one(_rollout(setup), backend, setup, seed=0))
    assert episode.log is not None and episode.reward.success is True
    learner = setup.agent_names[0]
    assert [t.turn for t in episode.log.turns if t.agent == learner] == [0, 2]  # the offer, then the thanks
    assert episode.calls == 3  # the malformed reply, its retry (the offer), and the move after the deal
    assert [tokenizer.decode(s.completion_ids) for s in episode.samples] == [offer]  # the offer alone


def test_an_episode_with_no_verifiable_facts_credits_every_move(tmp_path_factory):
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setup

    tokenizer = _tokenizer(tmp_path_factory)
    setup = sample_setup(load_library(), seed=0)
    backend = IdsBackend([_speak(line) for line in POLICY_LINES], tokenizer)
    rollout = _rollout(setup, partner="custom_agents:PoliteAgent", evaluator=RuleBasedEvaluator())
    episode = asyncio.run(play_one(rollout, backend, setup, seed=0))
    assert episode.log is not None and episode.reward.value is not None and episode.reward.success is None
    assert [tokenizer.decode(s.completion_ids) for s in episode.samples] == [_speak(x) for x in POLICY_LINES]
    for sample, request in zip(episode.samples, backend.requests, strict=True):
        assert (
            sample.prompt_ids
            == tokenizer(prompt_text(request.messages, tokenizer), add_special_tokens=False)["input_ids"]
        )
    second_prompt = tokenizer.decode(episode.samples[1].prompt_ids)
    assert "After you." in second_prompt and POLICY_LINES[0] in second_prompt  # the partner's turn: in the prompt


@pytest.mark.parametrize(
    ("kind", "line", "partial"),
    [
        ("bargaining", "Would you take $90 for it?", 1.0),  # a valid offer, too low to win, not an insult
        ("bargaining", "Would you take $10 for it?", 0.0),  # under half the floor: an insult, the partner leaves
        ("bargaining", "Would you take $10 or $20?", 0.0),  # two numbers: no offer
        ("scheduling", "Hello there, how are you?", 0.0),
    ],
)
def test_dense_reward_gives_capped_partial_credit_and_success_dominates(tmp_path_factory, kind, line, partial):
    tokenizer = _tokenizer(tmp_path_factory)
    setup = _verifiable_setup(kind)
    backend = IdsBackend([_speak(line)] * 2, tokenizer)
    failed = asyncio.run(play_one(_rollout(setup, dense_reward=2.0), backend, setup, seed=0))
    assert failed.reward.success is False and failed.reward.value == 2.0 * partial
    if kind == "bargaining":
        win = _speak(f"I can pay ${setup.scenario.verifiable.budget} for it.")  # the worst winning price: goal 0
        won = asyncio.run(play_one(_rollout(setup, dense_reward=2.0), IdsBackend([win] * 2, tokenizer), setup, 0))
        assert won.reward.success is True and won.reward.value == 0 + 2.0 >= failed.reward.value


# -- the loss -------------------------------------------------------------------------------------------------------


def _peft_model(spec, dropout: float = 0.0):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=dropout, target_modules="all-linear", task_type="CAUSAL_LM")
    return get_peft_model(AutoModelForCausalLM.from_pretrained(spec), lora)


def _samples_at(model, tokenizer, temperature: float) -> tuple[Sample, Sample]:
    """Two samples whose rollout log-probs are the model's own at ``temperature`` (on-policy)."""
    import torch

    prompt = tokenizer("Hello, how are you?", add_special_tokens=False)["input_ids"]
    out = []
    for text in ('{"action_type": "speak"}', '{"action_type": "leave", "argument": ""}'):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        stub = Sample(prompt, ids, [0.0] * len(ids), [0.0] * len(ids))
        with torch.no_grad():
            model.eval()
            logp, _ = token_logprobs(model, pack([stub], 0), temperature)
        values = logp[0].tolist()
        out.append(Sample(prompt, ids, values, values))
    return out[0], out[1]


def test_an_update_favours_the_better_episodes_tokens_over_the_worse(tmp_path_factory):
    import torch

    spec = tiny_model_spec(tmp_path_factory)
    tokenizer = _tokenizer(tmp_path_factory)
    model = _peft_model(spec)
    config = EpisodeGRPOConfig(beta=0.04, temperature=0.7)
    good, bad = _samples_at(model, tokenizer, 0.7)

    def logps() -> list[float]:
        with torch.no_grad():
            batch = pack([good, bad], pad_id=0)
            values, _ = token_logprobs(model, batch, 0.7)
            return (values * batch.loss_mask).sum(-1).tolist()

    before = logps()
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    tokens = len(good.completion_ids) + len(bad.completion_ids)
    loss, stats = policy_loss(model, [good, bad], [1.0, -1.0], config, total_tokens=tokens)
    assert stats.kl_ref == pytest.approx(0.0, abs=1e-6)  # a new LoRA starts as the reference model
    assert stats.approx_kl == pytest.approx(0.0, abs=1e-5) and stats.clipped == 0  # on-policy: ratio 1
    loss.backward()
    optimizer.step()
    after = logps()
    # a small gradient step moves log p(good) - log p(bad) by lr * |grad of it|^2 / tokens: up, always
    assert after[0] - after[1] > before[0] - before[1]


def test_the_ratio_clips_and_the_importance_weight_is_truncated(tmp_path_factory):
    spec = tiny_model_spec(tmp_path_factory)
    model = _peft_model(spec)
    good, _ = _samples_at(model, _tokenizer(tmp_path_factory), 1.0)
    n = len(good.completion_ids)
    config = EpisodeGRPOConfig(temperature=1.0, epsilon=0.2, epsilon_high=0.28, importance_sampling_cap=2.0)
    stale = Sample(good.prompt_ids, good.completion_ids, [v - 1.0 for v in good.logprobs], good.logprobs)
    loss, stats = policy_loss(model, [stale], [1.0], config, total_tokens=n)
    # the policy is e times likelier than at rollout: every ratio is clipped at 1.28 (no gradient), and the
    # sampler was e times likelier than the rollout policy: the weight is 1/e
    assert stats.clipped == n and stats.approx_kl / n == pytest.approx(math.e - 1 - 1, rel=1e-4)
    assert stats.is_weight / n == pytest.approx(math.exp(-1), rel=1e-4)
    assert float(loss) == pytest.approx(-1.28 * math.exp(-1), rel=1e-4)
    masked = Sample(good.prompt_ids, good.completion_ids, good.logprobs, [v - 5.0 for v in good.logprobs])
    _, stats = policy_loss(model, [masked], [1.0], config, total_tokens=n)
    assert stats.is_weight / n == pytest.approx(2.0)  # truncated at the cap


def test_the_loss_scores_the_rollout_distribution_temperature_applied_and_dropout_off(tmp_path_factory):
    """Rollout log-probs at temperature 0.7 from a model with LoRA dropout 0.5: the update's first pass scores
    the same distribution (approx_kl about 0), which it would not with dropout on or without the temperature."""
    import torch

    from sotopia_env.training.episode_grpo import update_policy

    spec = tiny_model_spec(tmp_path_factory)
    model = _peft_model(spec, dropout=0.5)
    with torch.no_grad():  # make the adapter matter, so that dropout on it would change the logits
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    samples = _samples_at(model, _tokenizer(tmp_path_factory), 0.7)
    config = EpisodeGRPOConfig(temperature=0.7, learning_rate=0.0)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=0.0)
    _, stats, tokens = update_policy(model, optimizer, [(samples[0], 1.0), (samples[1], -1.0)], config)
    assert stats.approx_kl / tokens < 1e-6 and stats.clipped == 0
    model.train()  # what the loss would see with dropout on
    noisy, _ = token_logprobs(model, pack([samples[0]], 0), 0.7)
    assert (noisy[0] - torch.tensor(samples[0].logprobs)).abs().max() > 1e-3
    model.eval()
    hot, _ = token_logprobs(model, pack([samples[0]], 0), 1.0)  # no temperature
    assert (hot[0] - torch.tensor(samples[0].logprobs)).abs().max() > 1e-3


def test_the_kl_reference_is_a_frozen_copy_of_the_continued_adapter(tmp_path, tmp_path_factory):
    import torch

    from sotopia_env.training.episode_grpo import REF_ADAPTER, load_policy, reference_policy

    spec = tiny_model_spec(tmp_path_factory)
    trained = _peft_model(spec)
    with torch.no_grad():
        for name, param in trained.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)  # a BC adapter: far from the adapter-free model
    trained.save_pretrained(str(tmp_path / "bc"))
    config = EpisodeGRPOConfig(base_model=spec, init_adapter=str(tmp_path / "bc"), beta=0.1, temperature=1.0)
    model, tokenizer, _, _ = load_policy(config)
    assert REF_ADAPTER in model.peft_config
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".default." in n for n in trainable)
    sample, _ = _samples_at(model, tokenizer, 1.0)
    n = len(sample.completion_ids)
    _, stats = policy_loss(model, [sample], [1.0], config, total_tokens=n)
    assert stats.kl_ref == pytest.approx(0.0, abs=1e-5)  # the reference is where GRPO starts ...
    with torch.no_grad(), model.disable_adapter():
        bare, _ = token_logprobs(model, pack([sample], 0), 1.0)
    assert (bare[0] - torch.tensor(sample.logprobs)).abs().max() > 1e-2  # ... not the adapter-free model
    with torch.no_grad():
        for name, param in model.named_parameters():
            if ".default." in name and "lora_B" in name:
                param.add_(0.3)
    _, moved = policy_loss(model, [sample], [1.0], config, total_tokens=n)
    assert moved.kl_ref > 1e-4  # the trained adapter moved; the reference did not
    with reference_policy(model):
        pass
    assert [n for n, p in model.named_parameters() if p.requires_grad] == trainable  # still the same ones


def _config(tmp_path: Path, model: str, **kw) -> EpisodeGRPOConfig:
    settings = dict(
        base_model=model, output_dir=str(tmp_path / "rl"), scenarios="verifiable:train",
        partner="rule-partner", evaluator="verifiable", group_size=2, groups_per_step=1, max_steps=2, max_turns=2,
        max_completion_length=8, learning_rate=1e-2, beta=0.04, save_steps=1, progress=False, seed=0,
        dynamic_sampling=False,
    )  # fmt: skip
    return EpisodeGRPOConfig(**{**settings, **kw})


def test_episode_grpo_steps_then_resume_continues_the_log(tmp_path, tmp_path_factory):
    spec = tiny_model_spec(tmp_path_factory)
    first = train_episode_grpo(_config(tmp_path, spec))
    assert first.task == "episodes" and first.steps == 2 and first.resumed_from is None
    assert first.placement == "cpu float32"  # no GPU here: the CPU, fp32 weights (bf16 would be autocast)
    assert [row["step"] for row in first.log] == [1, 2]
    for row in first.log:
        assert row["episodes"] == 2 and row["unrated"] == 0 and row["reward"] is not None and row["turns"] <= 2
        assert row["peak_rss_mb"] > 0 and row["groups"] == 1 and 0 <= row["zero_std_groups"] <= 1
        assert {"approx_kl", "clipped", "entropy", "kl_ref", "is_weight", "success"} <= set(row)
    assert (tmp_path / "rl" / "sotopia_model.json").is_file()
    assert sorted(p.name for p in (tmp_path / "rl" / "checkpoints").iterdir()) == ["step-1", "step-2"]

    again = train_episode_grpo(_config(tmp_path, spec, max_steps=3))
    assert again.resumed_from is not None and again.resumed_from.endswith("step-2")
    assert again.steps == 3 and again.log[:2] == first.log
    assert json.loads((tmp_path / "rl" / "grpo_result.json").read_text())["steps"] == 3


def test_generation_and_updates_share_one_worker_thread(tmp_path, tmp_path_factory, monkeypatch):
    # on CPU, generating on another thread than the one that ran the backward pass was twice as slow
    import threading

    import sotopia_env.training.episode_grpo as episode_grpo
    from sotopia_env.backends.local import LocalBackend

    threads: dict[str, set[int]] = {"generate": set(), "update": set()}
    from sotopia_env.backends.scheduler import Scheduler

    run_batch, schedule, update = LocalBackend._run_batch, Scheduler.run, episode_grpo.update_policy

    def recorded(kind, fn):
        def wrapper(*args, **kwargs):
            threads[kind].add(threading.get_ident())
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(LocalBackend, "_run_batch", recorded("generate", run_batch))
    monkeypatch.setattr(Scheduler, "run", recorded("generate", schedule))
    monkeypatch.setattr(episode_grpo, "update_policy", recorded("update", update))
    train_episode_grpo(_config(tmp_path, tiny_model_spec(tmp_path_factory)))
    assert len(threads["generate"]) == 1 and threads["generate"] == threads["update"]
    assert threading.get_ident() not in threads["generate"]


def test_unrated_episodes_get_no_advantage_and_are_counted(tmp_path, tmp_path_factory):
    # the verifiable judge cannot rate ordinary scenarios: every episode is unrated, never scored 0
    config = _config(tmp_path, tiny_model_spec(tmp_path_factory), scenarios="exchange", partner="custom_agents:Quiet")
    result = train_episode_grpo(config)
    assert result.none_rewards == 4 and result.unscorable_batches == 2
    assert all(row["reward"] is None and row["trained_sequences"] == 0 for row in result.log)


def test_pipeline_runs_rl_task_episodes_and_evaluates_it(tmp_path, tmp_path_factory):
    from sotopia_env.training.config import parse_config
    from sotopia_env.training.pipeline import run_pipeline

    raw = {
        "output_dir": str(tmp_path / "run"), "base_model": tiny_model_spec(tmp_path_factory),
        "env": {"max_turns": 2}, "generation": {"max_new_tokens": 8}, "evaluator": {"model": "verifiable"},
        "bc": {"enabled": False}, "sr": {"rounds": 0},
        "eval": {"partner": "rule-partner", "scenarios": "verifiable:dev"},
        "rl": {"task": "episodes", "partner": "rule-partner", "group_size": 2, "max_turns": 2,
               "scenarios": "verifiable:train", "max_steps": 1, "max_completion_length": 8, "progress": False},
    }  # fmt: skip
    state, report = run_pipeline(parse_config(raw, "cfg.yaml"), progress=False)
    assert list(state.stages) == ["eval-base", "rl", "eval-rl"]
    assert state.stages["rl"]["dataset"] == "episodes: 32 starts"
    assert [row.model for row in report.rows] == ["base", "rl"]
    finished = dict(state.stages)
    state, _ = run_pipeline(parse_config(raw, "cfg.yaml"), progress=False)  # done: every stage skipped
    assert state.stages == finished


def test_pipeline_bc_warm_start_with_a_partner_trains_only_the_experts_seat(tmp_path, tmp_path_factory):
    """``bc.partner``: the verifiable expert plays seat 1 against the rule partner; only its turns are examples,
    and RL continues the BC adapter. A rule partner on a scenario without hidden facts is one line."""
    from sotopia_env.errors import UserError
    from sotopia_env.training.config import parse_config
    from sotopia_env.training.pipeline import run_pipeline

    raw = {
        "output_dir": str(tmp_path / "run"), "base_model": tiny_model_spec(tmp_path_factory),
        "env": {"max_turns": 6}, "generation": {"max_new_tokens": 8}, "evaluator": {"model": "verifiable"},
        "train": {"max_steps": 1, "batch_size": 2},
        "bc": {"expert": "sotopia_env.training.experts:VerifiableExpert", "partner": "rule-partner",
               "scenarios": "bargaining:train", "episodes_per_scenario": 1, "filter": {"min_goal": 1}},
        "sr": {"rounds": 0}, "eval": {"enabled": False},
        "rl": {"task": "episodes", "partner": "rule-partner", "group_size": 2, "max_turns": 2,
               "scenarios": "bargaining:train", "max_steps": 1, "max_completion_length": 8, "progress": False},
    }  # fmt: skip
    state, _ = run_pipeline(parse_config(raw, "cfg.yaml"), progress=False)
    assert list(state.stages) == ["bc", "rl"]
    rows = [json.loads(line) for line in (tmp_path / "run" / "bc" / "dataset.jsonl").read_text().splitlines()]
    assert (
        rows and {r["seat"] for r in rows} == {0} and {r["scenario_id"].split("-")[1] for r in rows} == {"bargaining"}
    )
    assert any('"I could go up to $' in r["completion"][0]["content"] for r in rows)
    assert state.stages["bc"]["episodes"]["rated"] == 8
    bad = dict(raw, output_dir=str(tmp_path / "bad"), bc={**raw["bc"], "scenarios": "train"})
    with pytest.raises(UserError, match="verifiable") as error:
        run_pipeline(parse_config(bad, "cfg.yaml"), progress=False)
    assert "\n" not in str(error.value)


def test_train_grpo_cli_runs_episodes_and_a_bad_selector_is_one_line(tmp_path, tmp_path_factory):
    import yaml
    from typer.testing import CliRunner

    from sotopia_env.cli.main import app
    from sotopia_env.training.config import load_rl_config

    example = load_rl_config(Path(__file__).resolve().parents[1] / "examples" / "grpo-episodes-cpu.yaml")
    assert (example.task, example.partner, example.evaluator) == ("episodes", "rule-partner", "verifiable")
    raw = {
        "task": "episodes", "base_model": tiny_model_spec(tmp_path_factory), "output_dir": str(tmp_path / "rl"),
        "group_size": 2, "max_steps": 1, "max_turns": 2, "max_completion_length": 8,
    }  # fmt: skip
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["train", "grpo", str(tmp_path / "ok.yaml"), "--quiet"])
    assert result.exit_code == 0, result.output
    assert "grpo (episodes: 32 starts)" in result.output and "unrated episodes: 0" in result.output

    (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**raw, "scenarios": "no-such-scenario"}))
    result = CliRunner().invoke(app, ["train", "grpo", str(tmp_path / "bad.yaml"), "--quiet"])
    assert result.exit_code != 0 and "no-such-scenario" in result.output
    assert len(result.output.strip().splitlines()) == 1 and "Traceback" not in result.output


def first_choice(request) -> str:
    """A valid move for any request: the first choice where the schema lists the argument's, else speech."""
    branches = request.json_schema.get("anyOf", [request.json_schema])
    choices = next(
        (b["properties"]["argument"]["enum"] for b in branches if "enum" in b["properties"]["argument"]), None
    )
    if choices:
        return json.dumps({"action_type": "action", "argument": choices[0]})
    return _speak("I trust you all.")


def test_a_team_of_seats_plays_a_game_and_shares_its_exact_outcome(tmp_path_factory):
    from sotopia_env.library import load_library
    from sotopia_env.sampler import sample_setups

    library = load_library()
    (scenario,) = library.select(["werewolf-ashford"])
    setup = sample_setups([scenario], library, 1, seed=0)[0]
    rollout = _rollout(setup, role="wolves", partner="rule-player", env=EnvConfig())
    assert rollout.learner_seats(setup) == [0, 4]  # werewolf-ashford: the wolves sit in seats 1 and 5
    tokenizer = _tokenizer(tmp_path_factory)
    backend = IdsBackend(first_choice, tokenizer)
    episode = asyncio.run(play_one(rollout, backend, setup, seed=0))
    log = episode.log
    assert log is not None and log.termination_reason == "game_over", episode.error
    wolves = {setup.agent_names[0], setup.agent_names[4]}
    assert [a.model for a in log.agents] == ["scripted", *["rule-player"] * 3, "scripted", "rule-player"]
    moves = [t for t in log.turns if t.agent in wolves]
    assert len(episode.samples) == len(moves) == episode.calls  # every move of both wolves, and only theirs
    outcome = {log.rating.reward(n) for n in wolves}
    assert len(outcome) == 1 and episode.reward.value == outcome.pop()  # the team's exact outcome
    with pytest.raises(ValueError, match="has no role or team 'sheriff'"):
        _rollout(setup, role="sheriff").learner_seats(setup)


def test_episode_grpo_trains_one_role_of_a_game_on_its_outcome(tmp_path, tmp_path_factory):
    spec = tiny_model_spec(tmp_path_factory)
    config = _config(
        tmp_path,
        spec,
        scenarios="negotiation-game:train",
        role="proposer",
        partner="rule-player",
        max_steps=1,
        max_completion_length=128,
    )
    result = train_episode_grpo(config)
    (row,) = result.log
    assert row["episodes"] == 2 and row["unrated"] == 0 and row["reward"] is not None  # both rated: exact outcomes
    assert row["success"] is not None
    bad = _config(tmp_path / "bad", spec, scenarios="negotiation-game:train", role="sheriff", partner="rule-player")
    with pytest.raises(Exception, match="has no role or team 'sheriff'"):
        train_episode_grpo(bad)
