"""TRL's ``GRPOTrainer`` with ``rollout_func=episode_rollouts(...)`` (``training.trl_rollouts``): a scripted
tool-calling policy against an LLM partner and an LLM judge on a loopback server with 200 ms per call. The partner
turns of a batch overlap in time (the server sees more than one partner call in flight), the judge calls too, and
the trainer's rewards are the judge's."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("trl")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _loopback_server import respond  # noqa: E402
from loopback_openai import LoopbackOpenAI, Reply  # noqa: E402

from sotopia_env.training.seat_rows import SessionMaker, seat_rows  # noqa: E402
from sotopia_env.training.trl_rollouts import (  # noqa: E402
    REWARD_FIELD,
    ScriptedToolPolicy,
    episode_reward,
    episode_rollouts,
    rollout_dataset,
    row_of,
    speak_call,
)

DELAY_S = 0.2


class Recorder:
    """The loopback's responder: answers as the benchmarks' server does, after ``DELAY_S``, and counts the partner
    calls and the judge calls in flight at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = {"partner": 0, "judge": 0}
        self.most = {"partner": 0, "judge": 0}
        self.calls = {"partner": 0, "judge": 0}

    def __call__(self, body: dict) -> Reply:
        reply = respond(body)
        kind = "judge" if body.get("response_format") and "agent_1" in reply.text else "partner"
        if kind == "partner" and len(body.get("messages", [])) < 2:
            return Reply("OK")  # a preflight's probe
        with self.lock:
            self.now[kind] += 1
            self.calls[kind] += 1
            self.most[kind] = max(self.most[kind], self.now[kind])
        time.sleep(DELAY_S)
        with self.lock:
            self.now[kind] -= 1
        return reply


@pytest.fixture(scope="module")
def tokenizer(embedded_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_model_path)


def tiny_policy_model(tokenizer):
    """A one-layer random llama on the embedded model's tokenizer: the trainer's forward passes are cheap."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=8192, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def train_one_step(rollouts, rows, maker, tokenizer, tmp_path):
    """One GRPOTrainer step on ``rows`` (two prompts of two rollouts) with ``rollout_func=rollouts``; the trainer."""
    from trl import GRPOConfig, GRPOTrainer

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=1, learning_rate=1e-3, per_device_train_batch_size=4,
        num_generations=2, max_completion_length=2048, max_tool_calling_iterations=5, beta=0.0,
        logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True, use_cpu=True, seed=0,
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=tiny_policy_model(tokenizer),
        reward_funcs=[episode_reward],
        args=args,
        train_dataset=rollout_dataset(rows, maker),
        processing_class=rollouts.tokenizer,
        rollout_func=rollouts,
    )
    trainer.train()
    return trainer


def test_a_prompt_without_its_row_is_refused(tokenizer):
    with pytest.raises(ValueError, match="rollout_dataset"):
        row_of([{"role": "system", "content": "x"}, {"role": "user", "content": ""}])


def test_grpo_step_overlaps_partner_and_judge_calls(tokenizer, tmp_path):
    recorder = Recorder()
    with LoopbackOpenAI(recorder, request_queue_size=256) as server:
        maker = SessionMaker(api_base=server.base_url)
        rows = seat_rows("hard", partner="loopback", judge="loopback", max_turns=6, library=maker.library)[:2]
        episodes = []
        rollouts = episode_rollouts(maker, tokenizer, on_episode=lambda log, reward: episodes.append((log, reward)))
        rollouts.policy = ScriptedToolPolicy(rollouts.tokenizer, speak_call("Could we settle this together?"))
        trainer = train_one_step(rollouts, rows, maker, tokenizer, tmp_path)

    assert len(episodes) == 4  # one step: two rows, two rollouts each
    assert all(log is not None and len(log.turns) == 6 for log, _ in episodes)  # every move went through a tool
    assert recorder.calls["partner"] == 4 * 3 and recorder.calls["judge"] == 4
    assert recorder.most["partner"] > 1 and recorder.most["judge"] > 1  # a batch's calls overlap in time
    rewards = [reward for _, reward in episodes]
    assert all(reward is not None for reward in rewards)
    logged = list(trainer._logs["rewards"][REWARD_FIELD])
    assert sorted(logged) == sorted(rewards)


def _example():
    import importlib.util

    path = Path(__file__).resolve().parent.parent / "examples" / "trl_grpo.py"
    spec = importlib.util.spec_from_file_location("trl_grpo_example", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_the_example_reaches_sotopia_scenarios_with_a_budget_that_fits():
    example = _example()
    chosen = example.plan(
        example.parse_args(["--scenarios", "hard", "--partner", "loopback", "--judge", "loopback",
                            "--api-base", "http://127.0.0.1:9/v1", "--max-turns", "20"])
    )  # fmt: skip
    assert chosen.rows and {tuple(r.partners) for r in chosen.rows} == {("loopback",)}
    assert {r.evaluator for r in chosen.rows} == {"loopback"} and {r.seat for r in chosen.rows} == {0, 1}
    assert chosen.maker.api_base is not None and chosen.moves == 10 and chosen.max_tool_calls >= 10
    recipe = example.RECIPES["cpu"]
    assert chosen.max_completion_length == 10 * (recipe.move_tokens + example.ANSWER_TOKENS) > 256

    default = example.plan(example.parse_args(["--scenarios", "hard"]))  # no partner: not a failure
    assert {r.partners[0] for r in default.rows} == {example.EMBEDDED} and default.judge == example.EMBEDDED
    verifiable = example.plan(example.parse_args([]))
    assert verifiable.partner is None and {r.partners[0] for r in verifiable.rows} == {"rule-partner"}
    assert example.plan(example.parse_args(["--max-completion-length", "900"])).max_completion_length == 900


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--scenarios", "no-such-tag"], "trl_grpo.py: unknown scenario id 'no-such-tag'"),
        (["--max-turns", "0"], "--max-turns must be at least 1"),
        (["--rollouts", "sideways"], "invalid choice"),
    ],
)
def test_the_example_refuses_bad_arguments_in_one_line(argv, message, capsys):
    example = _example()
    with pytest.raises(SystemExit) as exc:
        example.plan(example.parse_args(argv))
    said = str(exc.value) + capsys.readouterr().err
    assert message in said


class SeatScores(Recorder):
    """The recorder's judge, rating the first agent's goal 8 and the second's 2 (the rest mid-scale): a seat's
    reward shows whose rating it carries."""

    GOALS = {"agent_1": 8, "agent_2": 2}

    def __call__(self, body: dict) -> Reply:
        reply = super().__call__(body)
        schema = ((body.get("response_format") or {}).get("json_schema") or {}).get("schema") or {}
        if "agent_1" not in (schema.get("properties") or {}):
            return reply
        rating = json.loads(reply.text)
        for agent, goal in self.GOALS.items():
            rating[agent]["goal"]["score"] = goal
        return Reply(json.dumps(rating))


def test_self_play_through_grpo_trainer_pairs_both_seats_in_one_episode(tokenizer, tmp_path):
    """Self-play under TRL: the policy drives both seats (partner ``self``), the two seats' prompts of a batch share
    their episodes, each seat's sample carries its own rating, and TRL's groups (one per prompt) are per seat."""
    from sotopia_env.training.seat_rows import SELF

    recorder = SeatScores()
    with LoopbackOpenAI(recorder, request_queue_size=256) as server:
        maker = SessionMaker(api_base=server.base_url)
        rows = seat_rows("hard", partner=SELF, judge="loopback", max_turns=6, library=maker.library)[:2]
        assert [r.seat for r in rows] == [0, 1] and rows[0].scenario == rows[1].scenario
        episodes = []
        rollouts = episode_rollouts(maker, tokenizer, on_episode=lambda log, reward: episodes.append((log, reward)))
        rollouts.policy = ScriptedToolPolicy(rollouts.tokenizer, speak_call("Could we settle this together?"))
        trainer = train_one_step(rollouts, rows, maker, tokenizer, tmp_path)

    assert len(episodes) == 4  # four samples: two prompts (one per seat), two rollouts each
    logs = {id(log): log for log, _ in episodes}
    assert len(logs) == 2  # ... played as two episodes, each seat a sample of both
    for log in logs.values():
        assert len(log.turns) == 6 and {t.agent for t in log.turns} == set(log.setup.agent_names)
        assert all("settle this together" in t.action.argument for t in log.turns)  # the policy, in both seats
    assert recorder.calls["partner"] == 0 and recorder.calls["judge"] == 2  # no partner model; one rating each
    assert sorted(reward for _, reward in episodes) == [2, 2, 8, 8]  # each seat's own goal
    assert sorted(trainer._logs["rewards"][REWARD_FIELD]) == [2, 2, 8, 8]


def test_self_play_plays_a_seat_no_prompt_asks_for_as_a_shadow(tokenizer):
    """A batch with one seat's prompts only: the policy plays the other seat too (not returned as a sample)."""
    from types import SimpleNamespace

    from sotopia_env.training.seat_rows import SELF

    with LoopbackOpenAI(SeatScores(), request_queue_size=64) as server:
        maker = SessionMaker(api_base=server.base_url)
        row = seat_rows("hard", partner=SELF, judge="loopback", max_turns=4, library=maker.library)[1]
        prompts = list(rollout_dataset([row], maker)["prompt"]) * 2
        rollouts = episode_rollouts(maker, tokenizer)
        rollouts.policy = ScriptedToolPolicy(rollouts.tokenizer, speak_call("Let us talk it over."))
        trainer = SimpleNamespace(args=SimpleNamespace(max_completion_length=2048, max_tool_calling_iterations=5))
        out = rollouts(prompts, trainer)
    assert row.seat == 1 and len(out["completion_ids"]) == 2 and out[REWARD_FIELD] == [2, 2]
    assert rollouts.policy.calls == 4  # four turns a episode, the shadow seat's two moved by the policy as well


def test_self_play_is_refused_on_verifiable_scenarios():
    from sotopia_env.training.seat_rows import SELF, SeatRowError

    maker = SessionMaker()
    row = seat_rows("verifiable:dev", partner=SELF, library=maker.library)[0]
    with pytest.raises(SeatRowError, match="self-play is for SOTOPIA scenarios and games"):
        maker.open_together(row)
