"""The verl agent loop (``training.verl_loop``), built the way verl's ``AgentLoopWorker`` builds it (its registry, or
an ``agent_loop_config_path`` file read with ``OmegaConf.load``, and ``hydra.utils.instantiate``) and run against
server managers that stand in for vLLM on CPU: one that replies with scripted tool calls, one that samples from a
model with transformers. verl's Ray workers and vLLM do not run here; the loop's inputs and outputs are verl's own
classes (``DictConfigWrap``, ``TokenOutput``, ``AgentLoopOutput``, ``AgentLoopMetrics``)."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml

pytest.importorskip("verl")

import hydra  # noqa: E402
from loopback_openai import LoopbackOpenAI, Reply  # noqa: E402
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
from sotopia_env.library import builtin_dir, load_library  # noqa: E402
from sotopia_env.training import verl_loop  # noqa: E402
from sotopia_env.training.seat_rows import SeatRow, SessionMaker, seat_rows  # noqa: E402
from sotopia_env.training.trl_env import tool_chat_template  # noqa: E402

CONFIG = {"actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": 3000,
          "multi_turn": {"format": "hermes", "max_assistant_turns": 8}}}}  # fmt: skip


def build_loop(tokenizer, server, config=None, entry=None):
    """The loop as verl's worker instantiates it: ``entry`` is an agent-loop YAML entry (default: the registry's)."""
    entry = entry if entry is not None else _agent_loop_registry[verl_loop.AGENT_NAME]
    assert entry["_target_"] == "sotopia_env.training.verl_loop.SocialAgentLoop"
    return hydra.utils.instantiate(
        entry,
        trainer_config=DictConfigWrap(OmegaConf.create(config or CONFIG)),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type="llama",
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(OmegaConf.create({})),
        tools=ToolListWrap([]),
    )


def run_loop(tokenizer, server, row, sampling_params=None, config=None, entry=None):
    """Build the loop inside the running event loop (as verl's worker does: the loop keeps it) and run one row."""

    async def go():
        loop = build_loop(tokenizer, server, config, entry)
        return await loop.run(sampling_params or {}, extra_info=row.model_dump())

    return asyncio.run(go())


class ScriptedServer:
    """Replies with these tool-call texts in turn, with made-up log-probs."""

    def __init__(self, tokenizer, replies: list[str], delay_s: float = 0.0) -> None:
        self.tokenizer, self.replies, self.sent, self.delay_s = tokenizer, list(replies), [], delay_s

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        await asyncio.sleep(self.delay_s)
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


def rollout_config(**changes):
    return {"actor_rollout_ref": {"rollout": {**CONFIG["actor_rollout_ref"]["rollout"], **changes}}}


def offers(*prices: int) -> list[str]:
    return [call(f"I can pay ${price}.") for price in prices]


@pytest.fixture
def episodes(monkeypatch):
    """The episode logs the loop's sessions finish with."""
    logs = []
    original = verl_loop.SeatSession.finish

    async def finish(self):
        log = await original(self)
        logs.append(log)
        return log

    monkeypatch.setattr(verl_loop.SeatSession, "finish", finish)
    return logs


def test_an_opening_longer_than_prompt_length_is_refused_naming_both_numbers(tokenizer):
    row = seat_rows("verifiable-bargaining-bike")[0]
    (length,) = verl_loop.opening_lengths([row], tokenizer, hf_model_type="llama")
    assert length > 512  # verl's default prompt_length would cut the scenario and the goal off
    server = ScriptedServer(tokenizer, offers(300))
    with pytest.raises(verl_loop.PromptTooLong) as refused:
        run_loop(tokenizer, server, row, config=rollout_config(prompt_length=512))
    message = str(refused.value)
    assert "\n" not in message and f"is {length} tokens" in message and "rollout.prompt_length=512" in message
    assert f"set {verl_loop.PROMPT_LENGTH}" in message and f"at least {length}" in message
    assert server.sent == []  # refused before the first generation

    out = run_loop(
        tokenizer, ScriptedServer(tokenizer, offers(300) * 8), row, config=rollout_config(prompt_length=length)
    )
    assert len(out.prompt_ids) == length  # the whole opening, as opening_lengths measured it


def test_metrics_are_filled_and_turns_are_counted_as_verl_counts_them(tokenizer, episodes):
    row = seat_rows("verifiable-bargaining-bike")[0]
    server = ScriptedServer(tokenizer, offers(250, 265, 280, 295, 310, 325, 340, 355), delay_s=0.02)
    out = run_loop(tokenizer, server, row)
    (log,) = episodes
    moves = len(server.sent)  # one tool call per generation, each a move answered by the partner
    assert moves >= 2 and sum(t.agent == log.setup.agent_names[0] for t in log.turns) == moves
    # verl's ToolAgentLoop: the opening + each generation + each round of answers; the system message is no turn
    assert out.num_turns == 1 + 2 * moves == 1 + len(log.turns)  # the learner's and the partner's turns
    metrics = out.metrics
    assert metrics.generate_sequences >= 0.02 * moves  # the server's time, every generation
    assert metrics.tool_calls > 0 and metrics.compute_score > 0 and metrics.num_preempted == -1
    assert out.as_dict()["metrics"]["generate_sequences"] == metrics.generate_sequences


def scenario_folder(tmp_path):
    """A scenarios folder of the user's own: the shipped bike, under another id."""
    shipped = yaml.safe_load((builtin_dir() / "scenarios" / "verifiable_bargaining.yaml").read_text())["scenarios"]
    bike = next(entry for entry in shipped if entry["id"] == "verifiable-bargaining-bike")
    folder = tmp_path / "scenarios"
    folder.mkdir()
    mine = {**bike, "id": "verifiable-bargaining-mine", "codename": "bargain_mine"}
    (folder / "mine.yaml").write_text(yaml.safe_dump({"scenarios": [mine]}))
    return folder


def test_the_loop_config_reaches_the_session(tokenizer, tmp_path):
    folder = scenario_folder(tmp_path)
    line = "Loopback partner here: make it $380."
    with LoopbackOpenAI(
        lambda body: Reply(json.dumps({"action_type": "speak", "argument": line})), latency_s=0.05
    ) as srv:
        (tmp_path / "agent_loops.yaml").write_text(
            f"- name: {verl_loop.AGENT_NAME}\n"
            "  _target_: sotopia_env.training.verl_loop.SocialAgentLoop\n"
            f"  api_base: [{srv.base_url}]\n"
            "  prompt: chat\n"
            f"  scenarios_dir: {folder}\n"
            "  scenarios: verifiable-bargaining-mine\n"
            "  partner: loopback\n"
        )
        (entry,) = OmegaConf.load(tmp_path / "agent_loops.yaml")  # as verl's worker reads agent_loop_config_path
        row = SeatRow(scenario="verifiable-bargaining-mine", partners=["rule-partner"], max_turns=4)
        out = run_loop(tokenizer, ScriptedServer(tokenizer, offers(300, 320, 340)), row, entry=entry)
        partner_calls = len(srv.requests)
        with pytest.raises(verl_loop.LoopConfigError, match="'verifiable-bargaining-bike' is not among"):
            run_loop(tokenizer, ScriptedServer(tokenizer, []), seat_rows("verifiable-bargaining-bike")[0], entry=entry)

    answers = tokenizer.decode([i for i, m in zip(out.response_ids, out.response_mask, strict=True) if not m])
    assert partner_calls >= 1 and line in answers  # the config's partner, at the config's api_base, not the row's
    assert out.metrics.tool_calls >= 0.05 * partner_calls  # its turns are the environment's time
    opening = tokenizer.decode(out.prompt_ids)
    library = load_library([folder])
    assert SessionMaker(library, prompt="chat").opening_system(row) in opening  # the config's prompt
    assert SessionMaker(library).opening_system(row) not in opening


@pytest.mark.parametrize(
    ("key", "value", "named"),
    [
        ("temprature", 1.0, "key 'temprature': unknown key"),
        ("prompt", "nope", "unknown prompt 'nope'"),
        ("api_base", "ftp://models", "key 'api_base': api_base 'ftp://models': not an http"),
        ("scenarios_dir", "/no/such/folder", "key 'scenarios_dir': /no/such/folder: no such file"),
        ("scenarios", "no-such-scenario", "key 'scenarios': unknown scenario id 'no-such-scenario'"),
    ],
)
def test_a_bad_loop_config_is_refused_in_one_line(tokenizer, key, value, named):
    entry = {**_agent_loop_registry[verl_loop.AGENT_NAME], "name": verl_loop.AGENT_NAME, key: value}

    async def build():
        return build_loop(tokenizer, ScriptedServer(tokenizer, []), entry=entry)

    with pytest.raises(Exception) as refused:  # hydra wraps what the loop raises in an InstantiationException
        asyncio.run(build())
    cause = refused.value if isinstance(refused.value, verl_loop.LoopConfigError) else refused.value.__cause__
    assert isinstance(cause, verl_loop.LoopConfigError), refused.value
    assert named in str(cause) and "\n" not in str(cause)


def test_the_configs_partner_and_judge_replace_the_rows():
    sotopia = seat_rows("hard", partner="rule-based", judge="rule-based")[0]
    verifiable = seat_rows("verifiable-bargaining-bike")[0]
    setup = verl_loop.LoopSetup(verl_loop.LoopConfig(partner="openai/gpt-4o-mini", judge="openai/gpt-4o"))
    assert setup.row(sotopia.model_dump()).partners == ["openai/gpt-4o-mini"]
    assert setup.row(sotopia.model_dump()).evaluator == "openai/gpt-4o"
    assert setup.row(verifiable.model_dump()).evaluator == "verifiable"  # judged exactly, whatever the config says
    assert verl_loop.LoopSetup(verl_loop.LoopConfig()).row(sotopia.model_dump()) == sotopia
