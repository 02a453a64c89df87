"""The chat-server backends (litellm, and the lean aiohttp client) against a real OpenAI-compatible server on
loopback; neither litellm nor aiohttp is patched. Every behaviour test runs on both."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from loopback_openai import LoopbackOpenAI, Reply

from sotopia_env.backends.base import ChatRequest, Completion
from sotopia_env.backends.litellm_backend import LiteLLMBackend
from sotopia_env.backends.openai_http import OpenAIHTTPBackend
from sotopia_env.backends.remote import RemoteBackend

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action_type": {"type": "string", "enum": ["none", "speak", "non-verbal communication", "action", "leave"]},
        "argument": {"type": "string"},
    },
    "required": ["action_type", "argument"],
    "additionalProperties": False,
}
ACTION = '{"action_type": "speak", "argument": "hi"}'

Server = Callable[..., LoopbackOpenAI]


@pytest.fixture
def server() -> Iterator[Server]:
    """Start loopback servers on demand; all are closed after the test."""
    started: list[LoopbackOpenAI] = []

    def start(responder: Any = None, **kwargs: Any) -> LoopbackOpenAI:
        srv = LoopbackOpenAI(responder, **kwargs).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.close()


Make = Callable[..., RemoteBackend]


@pytest.fixture(params=[LiteLLMBackend, OpenAIHTTPBackend], ids=["litellm", "http"])
def make(request: pytest.FixtureRequest) -> Make:
    """Builds the backend under test on a server, with small timeouts and backoff (``options`` override them)."""
    cls = request.param

    def build(srv: LoopbackOpenAI, model: str = "loopback", **options: Any) -> RemoteBackend:
        return cls(model, api_base=srv.base_url, **{"timeout_s": 5.0, "backoff_base_s": 0.01, **options})

    return build


def ask(content: str = "Say something.", schema: dict[str, Any] | None = SCHEMA) -> ChatRequest:
    return ChatRequest(
        messages=[{"role": "system", "content": "You are Ann."}, {"role": "user", "content": content}],
        json_schema=schema,
        max_new_tokens=32,
        seed=1,
    )


def run(backend: RemoteBackend, requests: list[ChatRequest]) -> list[Completion]:
    return asyncio.run(backend.generate(requests))


def scripted(*replies: Reply | str) -> Callable[[dict[str, Any]], Reply | str]:
    """A responder that plays ``replies`` in order, repeating the last one."""
    lock, queue = threading.Lock(), list(replies)

    def respond(body: dict[str, Any]) -> Reply | str:
        with lock:
            return queue.pop(0) if len(queue) > 1 else queue[0]

    return respond


def test_structured_reply_sends_response_format(server: Server, make: Make) -> None:
    srv = server(lambda body: ACTION)
    backend = make(srv)
    (out,) = run(backend, [ask()])
    assert out.ok and json.loads(out.text) == {"action_type": "speak", "argument": "hi"}
    assert "repaired" not in out.meta
    (body,) = srv.requests
    assert body["model"] == "loopback"  # the openai/ prefix is litellm's routing, not sent
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert body["response_format"]["json_schema"]["strict"] is True
    assert body["max_tokens"] == 32 and body["seed"] == 1


def test_schema_goes_in_prompt_without_structured_output(server: Server, make: Make) -> None:
    srv = server(lambda body: ACTION)
    backend = make(srv, structured_output=False)
    request = ask()
    (out,) = run(backend, [request])
    assert out.ok and json.loads(out.text)["action_type"] == "speak"
    (body,) = srv.requests
    assert "response_format" not in body
    assert json.dumps(SCHEMA) in body["messages"][-1]["content"]
    assert request.messages[-1]["content"] == "Say something."  # the caller's request is left alone


def test_hub_style_model_id_keeps_its_name(server: Server, make: Make) -> None:
    srv = server(lambda body: "hello")
    backend = make(srv, "Qwen/Qwen2.5-0.5B-Instruct")
    (out,) = run(backend, [ask(schema=None)])
    assert out.text == "hello" and backend.model == "Qwen/Qwen2.5-0.5B-Instruct"
    assert srv.requests[0]["model"] == "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.mark.parametrize(
    "reply",
    ['{"action_type": "speak", "argument": "hi"', ACTION + " Hope that helps!", "```json\n" + ACTION + "\n```"],
)
def test_malformed_json_is_repaired(server: Server, reply: str, make: Make) -> None:
    srv = server(lambda body: reply)
    (out,) = run(make(srv), [ask()])
    assert out.ok and out.meta["repaired"] is True
    assert json.loads(out.text) == {"action_type": "speak", "argument": "hi"}


@pytest.mark.parametrize("reply", ["I would rather just say hello.", "hello {", ""])
def test_unrepairable_reply_is_returned_raw(server: Server, reply: str, make: Make) -> None:
    srv = server(lambda body: reply)
    (out,) = run(make(srv), [ask()])
    assert out.ok and out.text == reply and "repaired" not in out.meta


def test_no_repair_without_schema(server: Server, make: Make) -> None:
    srv = server(lambda body: '{"a": 1')
    (out,) = run(make(srv), [ask(schema=None)])
    assert out.text == '{"a": 1' and "response_format" not in srv.requests[0]


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_error_is_retried(server: Server, status: int, make: Make) -> None:
    srv = server(scripted(Reply.fail(status, "slow down"), ACTION))
    (out,) = run(make(srv), [ask()])
    assert out.ok and json.loads(out.text)["argument"] == "hi"
    assert len(srv.requests) == 2 and out.meta["attempts"] == 2


def test_timeout_is_retried_then_reported(server: Server, make: Make) -> None:
    def respond(body: dict[str, Any]) -> Reply:
        slow = "slow" in body["messages"][-1]["content"]
        return Reply(ACTION, delay_s=3.0 if slow else 0.0)

    srv = server(respond)
    backend = make(srv, timeout_s=0.3, max_retries=2)
    slow, fast = run(backend, [ask("be slow"), ask("be quick")])
    assert fast.ok and json.loads(fast.text)["action_type"] == "speak"
    assert not slow.ok and slow.text == ""
    assert slow.error is not None and "\n" not in slow.error and "loopback" in slow.error
    assert "Timeout" in slow.error and "after 3 attempts" in slow.error
    assert sum("slow" in r["messages"][-1]["content"] for r in srv.requests) == 3


def test_retries_are_bounded(server: Server, make: Make) -> None:
    srv = server(lambda body: Reply.fail(429, "rate limited"))
    (out,) = run(make(srv, max_retries=2), [ask()])
    assert not out.ok and "HTTP 429" in str(out.error) and len(srv.requests) == 3


@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_fail_at_once(server: Server, status: int, make: Make) -> None:
    srv = server(lambda body: Reply.fail(status, "nope"))
    (out,) = run(make(srv), [ask()])
    assert not out.ok and out.text == "" and len(srv.requests) == 1
    assert out.error is not None and "\n" not in out.error
    assert out.error.startswith("loopback:") and f"HTTP {status}" in out.error


def test_concurrency_limit_is_respected(server: Server, make: Make) -> None:
    srv = server(lambda body: ACTION, latency_s=0.15)
    backend = make(srv, "loopback-limited", max_concurrency=2)
    outs = run(backend, [ask(f"turn {i}") for i in range(6)])
    assert all(o.ok for o in outs) and len(srv.requests) == 6
    assert srv.max_in_flight == 2


def test_requests_in_one_call_run_concurrently(server: Server, make: Make) -> None:
    srv = server(lambda body: ACTION, latency_s=0.2)
    outs = run(make(srv), [ask(f"turn {i}") for i in range(8)])
    assert all(o.ok for o in outs) and srv.max_in_flight == 8
    assert [json.loads(o.text)["argument"] for o in outs] == ["hi"] * 8


def test_256_requests_in_flight_at_once(server: Server, make: Make) -> None:
    barrier = threading.Barrier(256, timeout=20)  # every request waits until all 256 have arrived

    def respond(body: dict[str, Any]) -> str:
        barrier.wait()
        return ACTION

    srv = server(respond)
    outs = run(make(srv, "loopback-wide", max_concurrency=256), [ask(f"turn {i}") for i in range(256)])
    assert all(o.ok for o in outs) and srv.max_in_flight == 256


@pytest.mark.parametrize("cls", [LiteLLMBackend, OpenAIHTTPBackend], ids=["litellm", "http"])
def test_a_call_that_failed_on_one_server_is_retried_on_another(server: Server, cls: type[RemoteBackend]) -> None:
    bad, good = server(lambda body: Reply.fail(503, "overloaded")), server(lambda body: ACTION)
    backend = cls("loopback", api_base=f"{bad.base_url},{good.base_url}", timeout_s=5.0, backoff_base_s=30.0)
    outs = run(backend, [ask(f"turn {i}") for i in range(6)])
    assert sorted((o.ok, o.meta["attempts"]) for o in outs) == [(True, 1)] * 3 + [(True, 2)] * 3  # no backoff
    assert len(bad.requests) == 3 and len(good.requests) == 6  # three failures in a row: bad is rested
    assert backend.endpoints.endpoints[0].resting_until > 0


def test_token_counts_come_from_usage(server: Server, make: Make) -> None:
    srv = server(lambda body: Reply(ACTION, completion_tokens=7))
    (out,) = run(make(srv), [ask("one two three", schema=None)])
    assert out.prompt_tokens == 6  # "You are Ann." + "one two three", as the server counts
    assert out.completion_tokens == 7
    assert out.latency_s > 0


def test_api_key_is_used_but_never_exposed(server: Server, make: Make) -> None:
    secret = "sk-loopback-secret-0123456789"

    def respond(body: dict[str, Any]) -> Reply:
        if "fail" in body["messages"][-1]["content"]:
            return Reply.fail(401, f"Incorrect API key provided: {secret}")
        return Reply(ACTION)

    srv = server(respond)
    backend = make(srv, api_key=secret)
    good, bad = run(backend, [ask(), ask("fail")])
    assert all(h.get("authorization") == f"Bearer {secret}" for h in srv.headers)
    assert good.ok and not bad.ok
    for shown in (repr(good), repr(bad), json.dumps(good.meta), json.dumps(bad.meta), repr(backend), str(bad.error)):
        assert secret not in shown


def test_dummy_key_without_one(server: Server, monkeypatch: pytest.MonkeyPatch, make: Make) -> None:
    monkeypatch.delenv("SOTOPIA_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    srv = server(lambda body: ACTION)
    (out,) = run(make(srv), [ask()])
    assert out.ok and srv.headers[0]["authorization"] == "Bearer sk-none"


def test_backend_survives_several_event_loops(server: Server, make: Make) -> None:
    srv = server(lambda body: ACTION)
    backend = make(srv, "loopback-loops", max_concurrency=1)
    for _ in range(3):
        outs = run(backend, [ask(), ask()])
        assert all(o.ok for o in outs)
    assert len(srv.requests) == 6 and srv.max_in_flight == 1


PROBE = """
import socket, sys, asyncio
seen = []
real_connect, real_getaddrinfo = socket.socket.connect, socket.getaddrinfo
def connect(self, address, *a):
    seen.append(address)
    return real_connect(self, address, *a)
def getaddrinfo(host, *a, **k):
    seen.append((host,))
    return real_getaddrinfo(host, *a, **k)
socket.socket.connect, socket.getaddrinfo = connect, getaddrinfo
from sotopia_env.backends import litellm_backend
assert "litellm" not in sys.modules, "litellm imported eagerly"
from sotopia_env.backends.base import ChatRequest
b = litellm_backend.LiteLLMBackend("loopback", api_base=sys.argv[1], timeout_s=5)
(out,) = asyncio.run(b.generate([ChatRequest(messages=[{"role": "user", "content": "hi"}])]))
assert out.ok, out.error
bad = [a for a in seen if not (isinstance(a, tuple) and a[0] in ("127.0.0.1", "localhost"))]
assert not bad, bad
print("OK", len(seen))
"""


@pytest.fixture(scope="module", autouse=True)
def fresh_interpreter_probe() -> Iterator[subprocess.Popen[str]]:
    """Runs PROBE in a fresh interpreter, started first so that its (slow) litellm import overlaps the other tests."""
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    with LoopbackOpenAI(lambda body: ACTION) as srv:
        cmd = [sys.executable, "-c", PROBE, srv.base_url]
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) as proc:
            yield proc
            proc.kill()


def test_import_is_lazy_and_calls_only_loopback(fresh_interpreter_probe: subprocess.Popen[str]) -> None:
    """In a fresh interpreter: the module does not import litellm, and using it opens only loopback sockets."""
    stdout, stderr = fresh_interpreter_probe.communicate(timeout=60)
    assert fresh_interpreter_probe.returncode == 0, stderr[-2000:]
    assert stdout.startswith("OK")
    assert "cost map" not in stderr


def test_hosted_providers_get_a_schema_without_length_and_range_keywords():
    from sotopia_env.backends.remote import without_keywords
    from sotopia_env.evaluators import GOAL_ONLY
    from sotopia_env.evaluators.llm import rating_schema

    schema = rating_schema(2, GOAL_ONLY)
    schema["properties"]["agent_1"]["properties"]["maxLength"] = {"type": "string"}  # a property so named stays
    stripped = without_keywords(schema, frozenset({"maxLength", "minimum", "maximum"}))
    goal = stripped["properties"]["agent_1"]["properties"]["goal"]["properties"]
    assert goal["score"] == {"type": "integer"} and goal["reasoning"] == {"type": "string"}
    assert "maxLength" in stripped["properties"]["agent_1"]["properties"]
    assert schema["properties"]["agent_1"]["properties"]["goal"]["properties"]["score"]["maximum"] == 10


@pytest.mark.parametrize("cls", [LiteLLMBackend, OpenAIHTTPBackend], ids=["litellm", "http"])
def test_regex_requests_are_refused_not_ignored(cls: type[RemoteBackend]) -> None:
    backend = cls("openai/x", api_base="http://127.0.0.1:9/v1")
    (out,) = asyncio.run(backend.generate([ChatRequest([{"role": "user", "content": "hi"}], regex="a+")]))
    assert out.error and "needs the local backend" in out.error


# --- the lean aiohttp client only ---


def http(srv: LoopbackOpenAI, model: str = "loopback", **options: Any) -> OpenAIHTTPBackend:
    return OpenAIHTTPBackend(model, srv.base_url, **{"timeout_s": 5.0, "backoff_base_s": 0.01, **options})


def test_http_client_strips_only_routing_prefixes(server: Server) -> None:
    srv = server(lambda body: "hello")
    run(http(srv, "openai/served-name"), [ask(schema=None)])
    run(http(srv, "hosted_vllm/other"), [ask(schema=None)])
    run(http(srv, "Qwen/Qwen2.5-0.5B-Instruct"), [ask(schema=None)])
    assert [r["model"] for r in srv.requests] == ["served-name", "other", "Qwen/Qwen2.5-0.5B-Instruct"]


def test_http_client_reports_a_200_that_is_not_a_completion(server: Server) -> None:
    srv = server(lambda body: ACTION)
    backend = OpenAIHTTPBackend("loopback", api_base=srv.base_url + "/nowhere", timeout_s=5.0)  # 404 JSON there
    (out,) = run(backend, [ask()])
    assert not out.ok and "HTTP 404" in str(out.error) and "no route" in str(out.error)


def test_http_client_retries_refused_connections_then_reports(server: Server) -> None:
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = OpenAIHTTPBackend(
        "loopback", f"http://127.0.0.1:{port}/v1", timeout_s=2, backoff_base_s=0.01, max_retries=2
    )
    (out,) = asyncio.run(backend.generate([ask()]))
    assert not out.ok and "after 3 attempts" in str(out.error) and "\n" not in str(out.error)
    assert out.meta["attempts"] == 3


async def four_turns(backend: OpenAIHTTPBackend) -> Any:
    """Four calls in a row in one event loop; the loop's session."""
    for i in range(4):
        (out,) = await backend.generate([ask(f"turn {i}")])
        assert out.ok
    return await backend._sessions.get()


def test_http_client_reuses_connections_and_closes_at_loop_shutdown(server: Server) -> None:
    import gc
    import warnings

    srv = server(lambda body: ACTION)
    backend = http(srv)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        for _ in range(3):
            session = asyncio.run(four_turns(backend))
            assert session.closed  # closed when asyncio.run shut the loop down
        gc.collect()
    assert len(srv.requests) == 12
    assert srv.connections == 3  # one keep-alive connection per event loop, not one per call
    assert not len(backend._sessions)  # nothing kept for loops that are gone


def test_resolve_backend_picks_the_http_client_for_servers() -> None:
    from sotopia_env.backends.resolve import uses_openai_http

    base = "http://127.0.0.1:8000/v1"
    assert uses_openai_http("my-model", base) and uses_openai_http("openai/x", base)
    assert uses_openai_http("hosted_vllm/x", base) and uses_openai_http("Qwen/Qwen2.5-7B-Instruct", base)
    assert not uses_openai_http("ollama/llama3", base) and not uses_openai_http("litellm:openai/x", base)
    assert not uses_openai_http("gpt-4o-mini", None) and not uses_openai_http("anthropic/claude", base)


def test_resolve_backend_builds_each_client(server: Server) -> None:
    from sotopia_env.backends.resolve import release_backends, resolve_backend

    srv = server(lambda body: ACTION)
    try:
        http_backend = resolve_backend("resolve-test", api_base=srv.base_url)
        forced = resolve_backend("litellm:openai/resolve-test", api_base=srv.base_url)
        assert isinstance(http_backend, OpenAIHTTPBackend) and isinstance(forced, LiteLLMBackend)
        assert forced.model == "openai/resolve-test"
        assert resolve_backend("resolve-test", api_base=srv.base_url) is http_backend  # shared
        outs = run(http_backend, [ask()]) + run(forced, [ask()])
        assert all(o.ok for o in outs) and [r["model"] for r in srv.requests] == ["resolve-test"] * 2
    finally:
        release_backends({"resolve-test", "litellm:openai/resolve-test"})
