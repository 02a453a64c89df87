"""The OpenEnv server (``server.openenv_app``): OpenEnv's own client plays 16 episodes at once over loopback, each
seeing exactly its seat's observation (private messages included, others' never), as our own loop shows that seat."""

from __future__ import annotations

import asyncio

import httpx
import pytest

pytest.importorskip("openenv")

from seat_agents import Whisperer, scripted_policy  # noqa: E402
from server_harness import server_thread, websocket_status  # noqa: E402

from sotopia_env.agents.base import reset_agent  # noqa: E402
from sotopia_env.env import EnvConfig  # noqa: E402
from sotopia_env.episodes.runner import play  # noqa: E402
from sotopia_env.evaluators import make_evaluator  # noqa: E402
from sotopia_env.library import load_library  # noqa: E402
from sotopia_env.observation import Observation  # noqa: E402
from sotopia_env.prompt import render_prompt  # noqa: E402
from sotopia_env.sampler import sample_setup  # noqa: E402
from sotopia_env.server.openenv_app import SeatAction, SeatClient, create_openenv_app  # noqa: E402

SCENARIOS = "multi-party"
MAX_TURNS = 12


class Recorder:
    """The seat in our own loop: plays ``scripted_policy`` and keeps the prompt of every move."""

    def __init__(self) -> None:
        self.prompts: list[list[dict[str, str]]] = []

    async def act(self, observation):
        obs = Observation.from_env(observation)
        self.prompts.append(render_prompt(obs))
        return scripted_policy(obs, len(self.prompts) - 1)


async def direct(scenario: str, seat: int, seed: int):
    """The same episode through ``play`` (SocialEnv, our loop): the seat's prompts and the rated log."""
    setup = sample_setup(load_library(), seed=seed, scenario=scenario)
    recorder = Recorder()
    agents = [recorder if s == seat else Whisperer() for s in range(setup.scenario.num_agents)]
    for s, agent in enumerate(agents):
        reset_agent(agent, setup, s)
    log = await play(setup, agents, make_evaluator("rule-based", "goal"), EnvConfig(max_turns=MAX_TURNS), seed=seed)
    return recorder.prompts, log


async def client_episode(url: str, scenario: str, seat: int, seed: int):
    async with SeatClient(base_url=url) as env:
        result = await env.reset(scenario=scenario, seat=seat, seed=seed)
        prompts = []
        while not result.done:
            prompts.append(result.observation.messages)
            result = await env.step(SeatAction(**scripted_policy(result.observation, len(prompts) - 1)))
        return prompts, result, await env.state()


@pytest.fixture(scope="module")
def url():
    app = create_openenv_app(SCENARIOS, partner="seat_agents:Whisperer", judge="rule-based", max_turns=MAX_TURNS)
    with server_thread(app) as base:
        yield base


def test_sixteen_clients_at_once_each_see_their_seat(url):
    library = load_library()
    scenarios = sorted(s.id for s in library.select(SCENARIOS))
    starts = [(scenarios[k % len(scenarios)], k % 3, k) for k in range(16)]

    async def all_at_once():
        return await asyncio.gather(*(client_episode(url, *start) for start in starts))

    played = asyncio.run(all_at_once())
    heard_whispers = 0
    for (scenario, seat, seed), (prompts, result, state) in zip(starts, played, strict=True):
        expected_prompts, log = asyncio.run(direct(scenario, seat, seed))
        assert prompts == expected_prompts, f"{scenario} seat {seat}: the client's observations differ from our loop's"
        assert state.transcript == [t.model_dump(mode="json") for t in log.turns]
        assert result.reward == log.rating.reward(log.setup.agent_names[seat], "goal")
        assert result.observation.rated is True and state.done
        name = log.setup.agent_names[seat]
        seen = "\n".join(m["content"] for p in [*prompts, result.observation.messages] for m in p)
        for turn in log.turns:
            if turn.action.to is None:
                continue
            if name in turn.audience:
                assert turn.action.argument in seen, f"{name} did not see a private message to it"
                heard_whispers += turn.agent != name
            else:
                assert turn.action.argument not in seen, f"{name} saw a private message to {turn.action.to}"
    assert heard_whispers > 0  # some seats were whispered to, and saw it


def test_http_routes_and_malformed_actions(url):
    assert httpx.get(f"{url}/health").status_code == 200
    schema = httpx.get(f"{url}/schema").json()
    assert "action_type" in schema["action"]["properties"] and "messages" in schema["observation"]["properties"]
    opening = httpx.post(f"{url}/reset", json={"scenario": "multi-party-chore-rota", "seat": 1, "seed": 2}).json()
    assert opening["done"] is False and opening["observation"]["messages"][0]["role"] == "system"

    async def malformed():
        async with SeatClient(base_url=url) as env:
            first = await env.reset(scenario="multi-party-chore-rota", seat=0, seed=0)
            refused = [
                await env.step(SeatAction(text="I'd like to say hello")),
                await env.step(SeatAction(action_type="dance", argument="a jig")),
            ]
            await env.step(SeatAction(action_type="speak", argument="Hello all."))
            refused.append(await env.step(SeatAction(action_type="speak", argument="hi", to=["Nobody Here"])))
            for _ in range(2):  # the third refusal in a row is the seat's failed move: an agent error ends it
                last = await env.step(SeatAction(text="{}"))
            return first, refused, last

    first, (bad_json, bad_kind, bad_to), last = asyncio.run(malformed())
    assert "no JSON object" in bad_json.observation.error and not bad_json.done
    assert bad_kind.observation.error.startswith("invalid action field 'action_type'")
    assert bad_kind.observation.messages == first.observation.messages  # still the same move to make
    assert "'Nobody Here'" in bad_to.observation.error and not bad_to.done
    assert last.done and last.observation.termination_reason == "agent_error"

    with pytest.raises(RuntimeError, match="not served"):
        asyncio.run(client_episode(url, "verifiable-bargaining-bike", 0, 0))


def test_a_foreign_host_or_origin_is_refused_on_http_and_the_websocket(url):
    """DNS rebinding: a page on another name that points it at 127.0.0.1 cannot reach the episodes (#45)."""
    evil = "evil.example.com"
    assert httpx.get(f"{url}/health", headers={"Host": evil}).status_code == 400
    assert httpx.post(f"{url}/reset", json={}, headers={"Host": evil}).status_code == 400
    assert websocket_status(url, "/ws", host=evil)[0] == 400
    assert websocket_status(url, "/ws", origin=f"http://{evil}")[0] == 403
    assert httpx.post(f"{url}/reset", json={}, headers={"Origin": f"http://{evil}"}).status_code == 403
    assert websocket_status(url, "/ws")[0] == 101  # loopback, as OpenEnv's client connects: accepted
    assert httpx.get(f"{url}/health", headers={"Host": "localhost"}).status_code == 200


def test_cli_help_and_one_line_refusals():
    from typer.testing import CliRunner

    from sotopia_env.cli.main import app

    runner = CliRunner()
    shown = runner.invoke(app, ["openenv", "--help"])
    assert shown.exit_code == 0 and "OpenEnv" in shown.output and "--public" in shown.output
    for args, reason in [
        (["--host", "0.0.0.0"], "refusing to listen on 0.0.0.0"),
        (["--scenarios", "no-such-scenario"], "unknown scenario id 'no-such-scenario'"),
        (["--scenarios", "multi-party"], "give a partner"),
        (["--allowed-host", "*"], "only with a token"),
    ]:
        result = runner.invoke(app, ["openenv", *args])
        assert result.exit_code == 1 and reason in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1


def test_a_reset_or_step_the_server_cannot_serve_is_a_4xx_not_a_500(url):
    """Finding 8: ``/reset`` with an unknown scenario was a 500; a request the server cannot serve is a 4xx with a
    one-line detail."""
    for body, status in (
        ({"scenario": "no-such-scenario"}, 422),
        ({"scenario": "multi-party-chore-rota", "seat": 7}, 422),
        ({"scenario": "multi-party-chore-rota", "seat": 1.5}, 422),
        ({"scenario": ["multi-party-chore-rota"]}, 422),
    ):
        answer = httpx.post(f"{url}/reset", json=body)
        assert answer.status_code == status, (body, answer.text)
        assert "\n" not in answer.json()["detail"]
    step = httpx.post(f"{url}/step", json={"action": {"action_type": "speak", "argument": "hi"}})
    assert step.status_code == 409 and "WebSocket /ws" in step.json()["detail"], step.text
    deep = httpx.post(
        f"{url}/reset", content=b"[" * 50_000 + b"]" * 50_000, headers={"Content-Type": "application/json"}
    )
    assert 400 <= deep.status_code < 500, deep.text


def test_a_body_over_the_limit_is_refused_unread(url):
    """Finding 9: OpenEnv's routes read any body in full; over the main server's limit (1 MiB) it is a 413, and one
    without a Content-Length (chunked) a 411, as on ``serve``."""
    big = b'{"scenario": "' + b"x" * (2 << 20) + b'"}'
    answer = httpx.post(f"{url}/reset", content=big, headers={"Content-Type": "application/json"})
    assert answer.status_code == 413 and "limit" in answer.json()["detail"], answer.text
    chunked = httpx.post(f"{url}/step", content=iter([b'{"action": {}}']), headers={"Content-Type": "application/json"})
    assert chunked.status_code == 411, chunked.text
    assert httpx.post(f"{url}/reset", json={"scenario": "multi-party-chore-rota", "seat": 1}).status_code == 200
