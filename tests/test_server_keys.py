"""The server's keys stay home (issue #45): a request may name only the model servers the operator listed, a
foreign ``Host`` or ``Origin`` is refused (DNS rebinding), and ``serve`` makes a token unless it is turned off on
loopback. The model server is a loopback OpenAI-compatible server that records every request's headers."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

pytest.importorskip("fastapi", reason="the server needs the 'view' extra (fastapi)")
pytest.importorskip("uvicorn", reason="the server needs the 'view' extra (uvicorn)")
ws_client = pytest.importorskip("websockets.sync.client", reason="the server's streams need 'websockets'")

import httpx  # noqa: E402
from conftest import free_port  # noqa: E402
from server_harness import (  # noqa: E402
    printed_url,
    recording_server,
    scripted_models,
    server_thread,
    serving,
    wait_until_ended,
    websocket_status,
)
from typer.testing import CliRunner  # noqa: E402

from sotopia_env.cli.main import app as cli  # noqa: E402
from sotopia_env.episodes.sqlite_store import SQLiteStore  # noqa: E402
from sotopia_env.server import create_server  # noqa: E402
from sotopia_env.server.allowed_servers import covered_by  # noqa: E402
from sotopia_env.server.security import COOKIE, served_hosts  # noqa: E402
from sotopia_env.server.simulations import QUEUE  # noqa: E402
from sotopia_env.server.viewer import create_app  # noqa: E402

SECRET = "sk-SERVER-SECRET-42"
SCENARIO = "accommodation-drum-practice"
EVIL = "evil.example.com"


@pytest.fixture
def store(tmp_path: Path) -> SQLiteStore:
    return SQLiteStore(f"sqlite:///{tmp_path / 'episodes.db'}")


@pytest.fixture
def server_key(monkeypatch: pytest.MonkeyPatch) -> str:
    """The key the server holds for model servers at an api_base (what an attacker wants)."""
    monkeypatch.delenv("SOTOPIA_API_KEY", raising=False)
    monkeypatch.delenv("SOTOPIA_ENV_TOKEN", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    return SECRET


def simulation(api_base: str | None, **over) -> dict:
    body = {"scenario": SCENARIO, "agents": ["loopback"], "evaluator": "rule-based", "max_turns": 2, "seed": 3}
    return {**body, **({"api_base": api_base} if api_base else {}), **over}


def test_a_model_server_the_operator_did_not_list_gets_nothing(store, server_key) -> None:
    with scripted_models() as recorder, server_thread(create_server(store)) as base:
        with httpx.Client(base_url=base, timeout=30) as client:
            refused = client.post("/api/simulations", json=simulation(recorder.base_url))
            assert refused.status_code == 403, refused.text
            detail = refused.json()["detail"]
            assert recorder.base_url in detail and "--allow-api-base" in detail and "\n" not in detail
            trailing = simulation(f"http://127.0.0.1:{free_port()}/v1,{recorder.base_url}")
            assert client.post("/api/simulations", json=trailing).status_code == 403  # every URL of a list
            bench = {"model": "loopback", "partner": "loopback", "evaluator": "rule-based", "scenarios": SCENARIO}
            refused = client.post("/api/benchmarks", json=bench | {"api_base": recorder.base_url})
            assert refused.status_code == 403 and "--allow-api-base" in refused.json()["detail"]
            time.sleep(0.3)  # anything started by mistake would have called by now
    assert recorder.requests == [] and store.queue_items(QUEUE) == {} and store.queue_items("benchmarks") == {}


def test_a_model_server_the_operator_allowed_receives_the_calls(store, server_key) -> None:
    with scripted_models() as recorder, scripted_models() as default:
        allowed = [f"http://127.0.0.1:{recorder.port}/"]
        app = create_server(store, api_base=default.base_url, allowed_api_bases=allowed)
        with server_thread(app) as base, httpx.Client(base_url=base, timeout=30) as client:
            started = client.post("/api/simulations", json=simulation(recorder.base_url))
            assert started.status_code == 202, started.text
            assert wait_until_ended(client, started.json()["id"])["episode_status"] == "rated"
            calls = len(recorder.requests)
            plain = client.post("/api/simulations", json=simulation(None))  # no api_base: the server's default
            assert wait_until_ended(client, plain.json()["id"])["status"] == "done"
    assert calls > 0 and len(recorder.requests) == calls and len(default.requests) > 0
    assert {h["authorization"] for h in recorder.headers + default.headers} == {f"Bearer {SECRET}"}


def test_a_url_is_covered_only_by_its_own_server_and_path() -> None:
    prefix = "http://gpu1:8000/v1"
    covered = [prefix, f"{prefix}/", "http://GPU1:8000/v1/x"]
    tricks = ["http://gpu1:8000/v10", "http://gpu1:8000.evil.example.com/v1", "http://gpu1:8000@evil.example.com/v1"]
    tricks += ["http://gpu1.evil.example.com:8000/v1", "https://gpu1:8000/v1", "http://gpu1:8001/v1"]
    tricks += [f"{prefix}/../admin", f"{prefix}?to=evil", "http://gpu1:99999/v1"]
    assert [url for url in covered if not covered_by(url, prefix)] == []
    assert [url for url in tricks if covered_by(url, prefix)] == []
    assert covered_by("http://gpu1:80/v1", "http://gpu1/") and covered_by("http://gpu1/v1", "http://gpu1:80")


def test_a_foreign_host_is_a_400_on_http_and_on_the_websocket_for_server_and_viewer(store) -> None:
    hosts = served_hosts(extra=["lab.example.org"])
    with server_thread(create_server(store, allowed_hosts=hosts)) as base:
        port = base.rsplit(":", 1)[1]
        assert httpx.get(f"{base}/api/health", headers={"Host": EVIL}).status_code == 400
        assert httpx.get(f"{base}/api/health", headers={"Host": f"{EVIL}:{port}"}).status_code == 400
        for name in ("127.0.0.1", f"localhost:{port}", "[::1]", f"lab.example.org:{port}"):
            assert httpx.get(f"{base}/api/health", headers={"Host": name}).status_code == 200, name
        assert websocket_status(base, "/api/simulations/none/stream", host=EVIL)[0] == 400
        assert websocket_status(base, "/api/simulations/none/stream")[0] == 403  # reached the route: no such one
    with server_thread(create_app(store)) as base:
        assert httpx.get(f"{base}/api/episodes", headers={"Host": EVIL}).status_code == 400
        assert httpx.get(f"{base}/api/episodes").status_code == 200


def test_a_foreign_origin_is_refused_on_the_websocket_and_on_unsafe_methods(store) -> None:
    with scripted_models() as models, server_thread(create_server(store, api_base=models.base_url)) as base:
        own = {"Origin": base}
        with httpx.Client(base_url=base, timeout=30) as client:
            for origin in (f"http://{EVIL}", f"http://{EVIL}:{base.rsplit(':', 1)[1]}", "null"):
                refused = client.post("/api/simulations", json=simulation(None), headers={"Origin": origin})
                assert refused.status_code == 403 and "--allowed-origin" in refused.json()["detail"], origin
            sim_id = client.post("/api/simulations", json=simulation(None), headers=own).json()["id"]
            assert client.delete(f"/api/simulations/{sim_id}", headers={"Origin": f"http://{EVIL}"}).status_code == 403
            assert client.get(f"/api/simulations/{sim_id}", headers={"Origin": f"http://{EVIL}"}).status_code == 200
            wait_until_ended(client, sim_id)
        path = f"/api/simulations/{sim_id}/stream"
        status, body = websocket_status(base, path, origin=f"http://{EVIL}")
        assert status == 403 and b"Origin" in body
        assert websocket_status(base, path, origin=base)[0] == 101  # the server's own pages
        with ws_client.connect(base.replace("http://", "ws://") + path, origin=base, open_timeout=10) as ws:
            assert [json_type(raw) for raw in ws][-1] == "end"


def json_type(raw: str | bytes) -> str:
    import json

    return json.loads(raw)["type"]


def test_serve_makes_a_token_prints_its_url_and_calls_only_servers_it_was_given(tmp_path, server_key) -> None:
    port, db, log_path = free_port(), f"sqlite:///{tmp_path / 'episodes.db'}", tmp_path / "serve.log"
    base = f"http://127.0.0.1:{port}"
    with scripted_models() as recorder:
        allow = ("--allow-api-base", f"http://127.0.0.1:{recorder.port}/v1")
        with serving(port, db, "--library-dir", str(tmp_path / "lib"), *allow, log_path=log_path) as printed:
            url = printed_url(printed)
            token = parse_qs(urlsplit(url).query)["token"][0]
            assert url.startswith(base) and len(token) >= 24
            assert httpx.get(f"{base}/api/health").status_code == 401
            assert httpx.post(f"{base}/api/simulations", json=simulation(recorder.base_url)).status_code == 401
            opened = httpx.get(url)
            assert opened.status_code == 200 and f"sotopia_env_token={token}" in opened.headers["set-cookie"]
            with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
                started = client.post("/api/simulations", json=simulation(recorder.base_url))
                assert started.status_code == 202, started.text
                assert wait_until_ended(client, started.json()["id"])["status"] == "done"
    assert recorder.requests and {h["authorization"] for h in recorder.headers} == {f"Bearer {SECRET}"}
    output = log_path.read_text()
    assert output.count(token) == 1 and SECRET not in output  # printed once; the key never


def test_no_token_is_for_loopback_only_and_host_names_are_checked(store, monkeypatch) -> None:
    monkeypatch.delenv("SOTOPIA_ENV_TOKEN", raising=False)
    runner, serve = CliRunner(), ["serve", "--store", store.url, "--port", str(free_port())]
    cases = [
        (["--host", "0.0.0.0", "--no-token"], "refusing to listen on 0.0.0.0 without a token"),
        (["--no-token", "--token", "t"], "--no-token and a token"),
        (["--no-token", "--allowed-host", "*"], "--allowed-host '*'"),
        (["--token", "t", "--allowed-host", "http://lab.example.org"], "--allowed-host 'http://lab.example.org'"),
        (["--allow-api-base", "ftp://models.example.org"], "not an http:// or https:// URL"),
    ]
    for args, message in cases:
        result = runner.invoke(cli, serve + args)
        shown = " ".join(result.output.replace("│", " ").split())  # a usage error's box, unwrapped
        assert result.exit_code in (1, 2) and message in shown, (args, result.output)
    result = runner.invoke(cli, ["view", "--store", store.url, "--allowed-host", "a*b"])
    assert result.exit_code == 1 and "--allowed-host 'a*b'" in result.output


def test_view_off_loopback_needs_a_token_as_serve_does(tmp_path, monkeypatch) -> None:
    """Finding 4: ``view --host 0.0.0.0`` served every episode with no token; now it makes one and prints the URL
    to open (as ``serve`` does), and ``--no-token`` is for loopback only."""
    monkeypatch.delenv("SOTOPIA_ENV_TOKEN", raising=False)
    store = f"sqlite:///{tmp_path / 'episodes.db'}"
    SQLiteStore(store)
    port = free_port()
    command = [sys.executable, "-c", "from sotopia_env.cli.main import app; app()", "view", "--host", "0.0.0.0"]
    process = subprocess.Popen(
        [*command, "--port", str(port), "--store", store], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    printed: list[str] = []
    assert process.stdout is not None
    threading.Thread(target=lambda: printed.extend(process.stdout or []), daemon=True).start()
    try:
        deadline = time.monotonic() + 60
        while not any("?token=" in line for line in printed) and time.monotonic() < deadline:
            assert process.poll() is None, f"view exited: {printed}"
            time.sleep(0.1)
        url = printed_url("".join(printed))
        base = f"http://127.0.0.1:{port}"
        assert url.startswith(base)
        deadline = time.monotonic() + 30
        while True:  # printed once bound; listening a moment later
            try:
                assert httpx.get(f"{base}/api/episodes", timeout=10).status_code == 401
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline and process.poll() is None, "view did not listen"
                time.sleep(0.1)
        assert httpx.get(f"{base}/", timeout=10).status_code == 401
        with httpx.Client(timeout=10) as browser:
            assert browser.get(url).status_code == 200  # the printed URL sets the cookie
            assert browser.get(f"{base}/api/episodes").status_code == 200
    finally:
        process.kill()
        process.wait(timeout=10)
    refused = CliRunner().invoke(cli, ["view", "--host", "0.0.0.0", "--no-token", "--store", store])
    assert refused.exit_code == 1 and "refusing to listen on 0.0.0.0 without a token" in refused.output


def test_percent_encoded_dots_do_not_leave_the_allowed_path(store, server_key) -> None:
    """Finding 5: with ``/v1`` allowed, ``/v1/%2e%2e/%2e%2e/zz`` reached ``/zz/chat/completions`` with the key. An
    ``api_base`` is normalised (RFC 3986) before the prefix check, and the normalised URL is the one called."""
    with recording_server() as recorder:
        allowed = f"{recorder.base_url}/v1"
        with server_thread(create_server(store, allowed_api_bases=[allowed])) as base:
            with httpx.Client(base_url=base, timeout=30) as client:
                for trick in (
                    "/v1/%2e%2e/%2e%2e/zz",
                    "/v1/%2E%2E/zz",
                    "/v1/..%2fzz",
                    "/v1/%252e%252e/zz",
                    "/v1\\..\\zz",
                ):
                    refused = client.post("/api/simulations", json=simulation(recorder.base_url + trick))
                    assert refused.status_code == 403, (trick, refused.text)
                    assert "\n" not in refused.json()["detail"]
                inside = client.post("/api/simulations", json=simulation(f"{allowed}/%7Ex/%2e%2e/"))
                # allowed: the preflight calls the normalised URL (the recorder answers 404: a model not served)
                assert inside.status_code == 424 and "does not serve" in inside.json()["detail"], inside.text
    assert recorder.seen and {path for _, path, _ in recorder.seen} == {"/v1/chat/completions"}
    assert covered_by(f"{allowed}/a/%2E%2e/b", allowed) and not covered_by(f"{allowed}/%2e%2e", allowed)


def test_no_model_server_is_called_unless_the_operator_listed_it(store, server_key, monkeypatch) -> None:
    """Finding 6: ``"agents": ["ollama/x"]`` without an ``api_base`` called litellm's default Ollama server
    (``localhost:11434``; here ``$OLLAMA_API_BASE`` points that default at a loopback recorder). A spec that would
    reach a provider's default endpoint is refused (403, naming the model and the flag) unless the operator allows
    the provider (``--allow-provider``)."""
    with recording_server() as recorder:
        monkeypatch.setenv("OLLAMA_API_BASE", recorder.base_url)
        with server_thread(create_server(store)) as base, httpx.Client(base_url=base, timeout=30) as client:
            for body in (
                simulation(None, agents=["ollama/x"]),
                simulation(None, agents=["human"], evaluator="ollama_chat/judge"),
                simulation(None, agents=["human", "hosted_vllm/x"]),
                {"model": "ollama/x", "partner": "ollama/x", "evaluator": "rule-based", "scenarios": SCENARIO},
            ):
                kind = "benchmarks" if "model" in body else "simulations"
                refused = client.post(f"/api/{kind}", json=body)
                assert refused.status_code == 403, (body, refused.text)
                detail = refused.json()["detail"]
                assert "would call provider" in detail and "--allow-provider" in detail and "\n" not in detail
            time.sleep(0.3)  # anything started by mistake would have called by now
        assert recorder.seen == []
        app = create_server(store, allowed_providers=["ollama"])
        with server_thread(app) as base, httpx.Client(base_url=base, timeout=30) as client:
            allowed = client.post("/api/simulations", json=simulation(None, agents=["ollama/x"]))
            # allowed: the preflight calls it (the recorder answers 404: a model it does not serve)
            assert allowed.status_code == 424 and "'ollama/x'" in allowed.json()["detail"], allowed.text
    assert recorder.seen  # listed by the operator: called


def test_the_origin_is_compared_by_scheme_host_and_port(store) -> None:
    """Finding 7: a page on ``http://localhost:3000`` (another port of the same machine), with the browser's cookie,
    could post a seat move and open a WebSocket; only the server's own origin and those the operator lists may."""
    app = create_server(store, token="t0k", turn_timeout_s=30, allowed_origins=["https://lab.example.org"])
    with server_thread(app) as base, httpx.Client(base_url=base, timeout=30, cookies={COOKIE: "t0k"}) as client:
        port, cookie = base.rsplit(":", 1)[1], f"{COOKIE}=t0k"
        body = {"scenario": SCENARIO, "agents": ["human"], "evaluator": "none"}
        sim = client.post("/api/simulations", json=body, headers={"Origin": base}).json()
        seat = f"/api/simulations/{sim['id']}/seats/{next(iter(sim['human_seats']))}"
        stream = f"/api/simulations/{sim['id']}/stream"
        move = {"action_type": "speak", "argument": "hi"}
        for origin in (
            "http://localhost:3000",
            f"https://127.0.0.1:{port}",
            "http://127.0.0.1",
            f"http://[::1]:{port}",
        ):
            refused = client.post(seat, json=move, headers={"Origin": origin})
            assert refused.status_code == 403 and "--allowed-origin" in refused.json()["detail"], origin
            assert websocket_status(base, stream, origin=origin, cookie=cookie)[0] == 403, origin
        for origin in (base, f"http://127.0.0.1:{port}", "https://lab.example.org:443", "https://LAB.example.org"):
            assert client.post(seat, json=move, headers={"Origin": origin}).status_code != 403, origin
        assert websocket_status(base, stream, origin=base, cookie=cookie)[0] == 101
        client.delete(f"/api/simulations/{sim['id']}", headers={"Origin": base})  # ends the stream it opened
