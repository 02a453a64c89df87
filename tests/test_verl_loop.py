"""The verl agent loop (``training.verl_loop``), built the way verl's ``AgentLoopWorker`` builds it (its registry and
``hydra.utils.instantiate``) and run against server managers that stand in for vLLM on CPU: one that replies with
scripted tool calls, one that samples from a model with transformers."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("verl")

import hydra  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap, _agent_loop_registry  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from sotopia_env.evaluators import (  # noqa: E402
    EpisodeContext,
    evaluate_safely,
    make_evaluator,  # noqa: E402
)
from sotopia_env.training import verl_loop  # noqa: E402
from sotopia_env.training.seat_rows import seat_rows  # noqa: E402
from sotopia_env.training.trl_env import tool_chat_template  # noqa: E402

CONFIG = {"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 3000,
          "multi_turn": {"format": "hermes", "max_assistant_turns": 8}}}}  # fmt: skip


def build_loop(tokenizer, server):
    entry = _agent_loop_registry[verl_loop.AGENT_NAME]
    assert entry["_target_"] == "sotopia_env.training.verl_loop.SocialAgentLoop"
    return hydra.utils.instantiate(
        entry,
        trainer_config=DictConfigWrap(OmegaConf.create(CONFIG)),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="llama",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(OmegaConf.create({})),
        tools=ToolListWrap([]),
    )


def run_loop(tokenizer, server, row, sampling_params=None):
    """Build the loop inside the running event loop (as verl's worker does: the loop keeps it) and run one row."""

    async def go():
        return await build_loop(tokenizer, server).run(sampling_params or {}, extra_info=row.model_dump())

    return asyncio.run(go())


class ScriptedServer:
    """Replies with these tool-call texts in turn, with made-up log-probs."""

    def __init__(self, tokenizer, replies: list[str]) -> None:
        self.tokenizer, self.replies, self.sent = tokenizer, list(replies), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        ids = self.tokenizer.encode(self.replies.pop(0), add_special_tokens=False)
        self.sent.append(ids)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids))


def call(words: str, name: str = "speak") -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {{"words": "{words}"}}}}\n</tool_call><|im_end|>'


@pytest.fixture(scope="module")
def tokenizer(embedded_model_path):
    return tool_chat_template(AutoTokenizer.from_pretrained(embedded_model_path))


def test_tool_calls_play_the_episode_and_only_the_policy_is_trained(tokenizer):
    row = seat_rows("verifiable-bargaining-bike")[0]
    replies = [call("hello", name="dance"), call("Would you take $60?"), call("I can do $75."), call("Deal at $75?")]
    replies += [call("Thanks!")] * 4
    server = ScriptedServer(tokenizer, replies)
    out = run_loop(tokenizer, server, row, {"temperature": 1.0})

    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    policy = [i for i, m in zip(out.response_ids, out.response_mask, strict=True) if m]
    assert policy == [i for ids in server.sent for i in ids]  # exactly the sampled ids, and nothing else
    others = tokenizer.decode([i for i, m in zip(out.response_ids, out.response_mask, strict=True) if not m])
    assert "there is no tool 'dance'" in others and "Turn #1:" in others  # the answers: errors, partners' moves
    assert out.extra_fields["rated"] is True
    said = [t for t in tokenizer.decode(out.response_ids).split("\n") if "said:" in t]
    assert said and "Would you take $60?" in said[0]  # the refused call made no move
    assert 0.0 <= out.reward_score <= 10.0
    as_dict = out.as_dict()
    assert as_dict["rm_scores"][-1].item() == pytest.approx(out.reward_score)


def test_reward_is_the_verifiable_judges(tokenizer):
    row = seat_rows("verifiable-bargaining-bike")[0]
    episodes = []
    original = verl_loop.SeatSession.finish

    async def finish(self):
        log = await original(self)
        episodes.append(log)
        return log

    verl_loop.SeatSession.finish = finish
    try:
        server = ScriptedServer(tokenizer, [call("How about $90?")] + [call("I can go to $110.")] * 8)
        out = run_loop(tokenizer, server, row)
    finally:
        verl_loop.SeatSession.finish = original
    (log,) = episodes
    context = EpisodeContext(setup=log.setup, turns=log.turns, termination_reason=log.termination_reason or "")
    again = evaluate_safely(make_evaluator("verifiable", "goal"), context).reward(log.setup.agent_names[0], "goal")
    assert out.reward_score == again


class SamplingServer:
    """vLLM's part, played by transformers on CPU: samples a reply to the prompt ids, with its log-probs."""

    def __init__(self, model_dir) -> None:
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir)

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        import torch

        torch.manual_seed(0)
        prompt = torch.tensor([prompt_ids])
        out = self.model.generate(prompt, do_sample=True, max_new_tokens=16, output_scores=True,
                                  return_dict_in_generate=True, pad_token_id=0)  # fmt: skip
        ids = out.sequences[0, prompt.shape[1] :].tolist()
        logprobs = [torch.log_softmax(s[0], -1)[i].item() for s, i in zip(out.scores, ids, strict=True)]
        return TokenOutput(token_ids=ids, log_probs=logprobs)


def test_a_model_behind_the_server(tiny_model_dir):
    tokenizer = tool_chat_template(AutoTokenizer.from_pretrained(tiny_model_dir))
    row = seat_rows("verifiable-bargaining-bike")[0]
    out = run_loop(tokenizer, SamplingServer(tiny_model_dir), row)
    assert (
        1 <= sum(out.response_mask) <= 16 * CONFIG["actor_rollout_ref"]["rollout"]["multi_turn"]["max_assistant_turns"]
    )
    assert len(out.response_logprobs) == len(out.response_ids) and out.extra_fields["rated"] is True
