"""The episode viewer (``sotopia-env view``): pages, JSON, filters, sorting, escaping, read-only."""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import free_port
from episode_fixtures import make_episode
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from sotopia_env.actions import ActionType, AgentAction
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.redis_store import RedisStore
from sotopia_env.episodes.report import build_report
from sotopia_env.episodes.sqlite_store import SQLiteStore
from sotopia_env.episodes.store import EpisodeStore, StoreError
from sotopia_env.observation import background_for
from sotopia_env.server.viewer import create_app
from sotopia_env.server.viewer.index import Summary, SummaryIndex
from sotopia_env.server.viewer.listing import ListQuery, list_episodes, page_from_index
from sotopia_env.server.viewer.reports import summary_report
from sotopia_env.transcript import Turn

XSS = "<script>alert('pwned')</script>"
LOOPBACK = "http://127.0.0.1"  # the viewer answers only its own Host names (not TestClient's "testserver")
STATUSES = ("rated", "rated", "unrated", "failed")
MODELS = (("smollm2-135m", "gpt-4o-mini"), ("gpt-4o-mini", "llama-3-8b"), ("llama-3-8b", "smollm2-135m"))


def sample_episodes() -> list[EpisodeLog]:
    """24 episodes over two tags, three model pairs, every status and several scenarios and splits."""
    return [
        make_episode(i, tag="alpha" if i % 2 == 0 else "beta", status=STATUSES[i % 4], models=MODELS[i % 3])
        for i in range(24)
    ]


def hostile_episode() -> EpisodeLog:
    """A rated episode whose transcript, reasoning, model and tag all carry markup."""
    log = make_episode(100, tag="xss", episode_id="ep-xss", models=(XSS, "gpt-4o-mini"))
    first = log.setup.agent_names[0]
    log.turns[0] = Turn(turn=0, agent=first, action=AgentAction(action_type=ActionType.speak, argument=XSS))
    assert log.rating is not None and log.rating.ratings is not None
    log.rating.ratings[first].scores["goal"].reasoning = XSS
    return log


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def store(request, tmp_path) -> Iterator[EpisodeStore]:
    """The sample episodes in SQLite, and in Redis where REDIS_URL names a server."""
    if request.param == "sqlite":
        st: SQLiteStore | RedisStore = SQLiteStore(f"sqlite:///{tmp_path / 'episodes.db'}")
    else:
        url = os.environ.get("REDIS_URL")
        if not url:
            pytest.skip("REDIS_URL is not set: viewer tests over Redis skipped")
        st = RedisStore(url, prefix=f"sotopia-viewer-test-{uuid.uuid4().hex[:12]}")
    st.put_many([*sample_episodes(), hostile_episode()])
    try:
        yield st
    finally:
        if isinstance(st, RedisStore):
            st.clear()
        st.close()


@pytest.fixture
def client(store):
    with TestClient(create_app(store), base_url=LOOPBACK) as c:
        yield c


def split_of(log: EpisodeLog) -> str:
    return log.setup.scenario.split


def ids(response) -> list[str]:
    assert response.status_code == 200, response.text
    return [item["id"] for item in response.json()["items"]]


# -- the list ---------------------------------------------------------------------------------------


def test_list_page_shows_newest_first_with_links(client, store):
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "25 episodes" in r.text
    assert 'href="/episodes/ep-00000"' in r.text and 'href="/episodes/ep-00023"' in r.text
    newest = [log.id for log in store.query()][::-1]
    assert ids(client.get("/api/episodes")) == newest
    assert ids(client.get("/api/episodes?order=asc")) == newest[::-1]


@pytest.mark.parametrize(
    ("params", "keep"),
    [
        ("tag=alpha", lambda log: log.tag == "alpha"),
        ("model=llama-3-8b", lambda log: "llama-3-8b" in log.models),
        ("status=unrated", lambda log: log.status == "unrated"),
        ("status=failed&tag=beta", lambda log: log.status == "failed" and log.tag == "beta"),
        ("split=test", lambda log: split_of(log) == "test"),
        ("split=train&model=gpt-4o-mini", lambda log: split_of(log) == "train" and "gpt-4o-mini" in log.models),
    ],
)
def test_filters(client, store, params, keep):
    expected = [log.id for log in store.query() if keep(log)][::-1]
    assert expected, "the sample data should exercise this filter"
    r = client.get(f"/api/episodes?{params}&limit=500")
    assert ids(r) == expected and r.json()["total"] == len(expected)


def test_scenario_filter(client, store):
    scenario = store.get("ep-00003").scenario_id
    expected = {log.id for log in store.query(scenario=scenario)}
    assert set(ids(client.get(f"/api/episodes?scenario={scenario}"))) == expected


@pytest.mark.parametrize("seat", ["1", "2", "mean", "max", "min"])
@pytest.mark.parametrize("dimension", ["goal", "overall", "secret"])
def test_sort_by_score(client, store, seat, dimension):
    logs = store.query()
    summaries = {log.id: Summary.of(log) for log in logs}

    def key(log_id: str) -> float:
        value = summaries[log_id].score(dimension, seat)
        return float("nan") if value is None else value

    unscored = [log.id for log in logs if log.status != "rated"]  # oldest first, after every scored one
    best_first = ids(client.get(f"/api/episodes?sort={dimension}&seat={seat}&limit=500"))
    scored = best_first[: len(logs) - len(unscored)]
    assert [key(i) for i in scored] == sorted((key(i) for i in scored), reverse=True)
    assert best_first[len(scored) :] == unscored
    worst_first = ids(client.get(f"/api/episodes?sort={dimension}&seat={seat}&order=asc&limit=500"))
    assert [key(i) for i in worst_first[: len(scored)]] == sorted(key(i) for i in scored)
    assert worst_first[len(scored) :] == unscored


def test_seat_scores_follow_the_episode(store):
    log = store.get("ep-00001")
    summary = Summary.of(log)
    names = [a.name for a in log.agents]
    one, two = (log.score(n, "goal") for n in names)
    assert (summary.score("goal", "1"), summary.score("goal", "2")) == (one, two)
    assert summary.score("goal", "max") == max(one, two) and summary.score("goal", "mean") == (one + two) / 2
    assert summary.score("overall", "1") == pytest.approx(log.score(names[0], "overall"))
    assert Summary.of(store.get("ep-00002")).score("goal") is None  # unrated


def test_pagination(client):
    first = client.get("/api/episodes?limit=10").json()
    second = client.get("/api/episodes?limit=10&offset=10").json()
    third = client.get("/api/episodes?limit=10&offset=20").json()
    assert first["total"] == 25 and len(first["items"]) == 10 and len(third["items"]) == 5
    everything = ids(client.get("/api/episodes?limit=500"))
    assert [i["id"] for p in (first, second, third) for i in p["items"]] == everything
    page = client.get("/?limit=10&offset=10&tag=").text
    assert "11–20 of" in page
    assert 'href="/?sort=created&amp;seat=mean&amp;order=desc&amp;offset=0&amp;limit=10"' in page
    assert 'href="/?sort=created&amp;seat=mean&amp;order=desc&amp;offset=20&amp;limit=10"' in page


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("offset", [0, 7, 20, 30])
@pytest.mark.parametrize("tag", [None, "alpha"])
def test_store_pages_match_index_pages(store, order, offset, tag):
    """Unsorted, unsplit lists come straight from the store; they must equal the index's pages."""
    index = SummaryIndex(store)
    q = ListQuery(tag=tag, order=order, offset=offset, limit=7)
    direct = list_episodes(store, index, q)
    assert index.peek() is None  # the store answered without building the index
    via_index = page_from_index(index, q)
    assert [s.id for s in direct.items] == [s.id for s in via_index.items]
    assert direct.total == via_index.total and direct.items == via_index.items


@pytest.mark.parametrize(
    "params",
    [
        "status=done",
        "seat=third",
        "seat=0",
        "sort=Goal;drop",
        "order=sideways",
        "limit=0",
        "limit=501",
        "offset=-1",
        "offset=679086136422900563968",
    ],
)
def test_bad_parameters_are_rejected(client, params):
    r = client.get(f"/api/episodes?{params}")
    assert r.status_code == 422 and r.json()["detail"]
    page = client.get(f"/?{params}")
    assert page.status_code == 422 and "Bad request" in page.text


def test_facets(client):
    facets = client.get("/api/facets").json()
    assert facets["tags"] == ["alpha", "beta", "xss"]
    assert "llama-3-8b" in facets["models"] and XSS in facets["models"]
    assert set(facets["splits"]) <= {"train", "dev", "test"} and "goal" in facets["dimensions"]


# -- one episode --------------------------------------------------------------------------------------


def test_episode_page_shows_everything(client, store):
    log = store.get("ep-00001")
    r = client.get("/episodes/ep-00001")
    assert r.status_code == 200
    html = r.text
    assert _escaped(log.setup.scenario.scenario) in html
    for seat, character in enumerate(log.setup.characters):
        assert _escaped(character.name) in html
        assert _escaped(log.setup.scenario.goals[seat]) in html
        assert _escaped(background_for(log.setup, seat)) in html  # what this seat could see of the other
    for kind in ("speak", "nonverbal", "action", "leave", "none"):
        assert f'<li class="{kind}">' in html
    assert _escaped(log.turns[1].action.argument) in html
    assert "everyone_left" in html
    assert log.rating is not None and log.rating.ratings is not None
    for name, rating in log.rating.ratings.items():
        for dim, score in rating.scores.items():
            assert f"<th>{dim}</th>" in html
            assert _escaped(score.reasoning) in html
        assert f"{name} scored" in html


def test_unrated_and_failed_episodes_show_their_errors(client, store):
    unrated = client.get("/episodes/ep-00002").text
    assert "Unrated: evaluator output invalid after 3 attempts" in unrated
    assert '<table class="scores">' not in unrated
    failed = client.get("/episodes/ep-00003").text
    assert "The episode failed: RuntimeError: backend connection reset" in failed
    assert store.get("ep-00003").status == "failed"


def test_episode_json(client, store):
    log = store.get("ep-00001")
    body = client.get("/api/episodes/ep-00001").json()
    assert EpisodeLog.model_validate(body["episode"]) == log
    assert body["backgrounds"] == [background_for(log.setup, s) for s in range(2)]
    assert body["overall"] == {a.name: pytest.approx(log.score(a.name, "overall")) for a in log.agents}


def test_unknown_episode_is_404(client):
    assert client.get("/episodes/nope").status_code == 404
    r = client.get("/api/episodes/nope")
    assert r.status_code == 404 and "nope" in r.json()["detail"]


# -- safety -----------------------------------------------------------------------------------------------


def test_everything_is_escaped(client):
    for path in ("/", "/?tag=xss", "/episodes/ep-xss", "/report?tag=xss", f"/?model={XSS}", f"/episodes/{XSS}"):
        html = client.get(path).text
        assert "<script" not in html, path
    page = client.get("/episodes/ep-xss").text
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in page
    assert page.count("&lt;script&gt;") >= 3  # the turn, the reasoning and the model


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"])
@pytest.mark.parametrize("path", ["/", "/api/episodes", "/episodes/ep-00001", "/api/episodes/ep-00001", "/report"])
def test_read_only(client, store, method, path):
    r = client.request(method, path)
    assert r.status_code == 405 and r.headers["allow"] == "GET"
    assert store.count() == 25


def test_offline_headers(client):
    r = client.get("/episodes/ep-00001")
    assert "default-src 'none'" in r.headers["content-security-policy"]
    for path in ("/", "/episodes/ep-00001", "/report"):
        html = client.get(path).text
        assert "http://" not in html and "https://" not in html and "//cdn" not in html  # nothing external
    assert client.get("/docs").status_code == 404  # Swagger UI would load from a CDN


def test_store_errors_are_503(tmp_path):
    class DownStore:
        url = "redis://example:6379/0"

        def __getattr__(self, name):
            def fail(*args, **kwargs):
                raise StoreError("cannot reach Redis at redis://example:6379/0: Connection refused")

            return fail

    with TestClient(create_app(DownStore()), base_url=LOOPBACK) as c:  # type: ignore[arg-type]
        r = c.get("/")
        assert r.status_code == 503 and "Connection refused" in r.text
        assert c.get("/api/episodes?sort=goal").status_code == 503


# -- the report ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("tag", [None, "alpha", "beta"])
@pytest.mark.parametrize("by_seat", [False, True])
def test_report_json_matches_the_report_command(client, store, tag, by_seat):
    expected = build_report(store.iter(tag), tag=tag, group_by_seat=by_seat).to_dict()
    params = {k: v for k, v in (("tag", tag), ("by_seat", str(by_seat).lower())) if v}
    assert client.get("/api/report", params=params).json() == expected


def test_summary_report_equals_build_report(store):
    logs = list(store.iter())
    for by_seat in (False, True):
        ours = summary_report((Summary.of(log) for log in logs), "t", by_seat).to_dict()
        assert ours == build_report(logs, tag="t", group_by_seat=by_seat).to_dict()


def test_report_page_and_chart(client):
    html = client.get("/report?tag=alpha").text
    assert "<h1>Report: alpha</h1>" in html
    for model in ("smollm2-135m", "gpt-4o-mini", "llama-3-8b"):
        assert f"<th>{model}</th>" in html
    assert 'src="/report.png?tag=alpha"' in html and "n=" in html and "[" in html
    png = client.get("/report.png?tag=alpha")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert client.get("/report.png?tag=nosuchtag").status_code == 404
    assert "No episodes with this tag" in client.get("/report?tag=nosuchtag").text
    assert "all tags" in client.get("/report").text


# -- freshness ----------------------------------------------------------------------------------------------


def test_new_episodes_appear_without_a_full_rebuild(client, store):
    assert client.get("/api/episodes?sort=goal").json()["total"] == 25
    version = client.app.state.index.peek().version
    store.put(make_episode(500, tag="later", created_at="2030-01-01T00:00:00+00:00"))
    assert "ep-00500" in ids(client.get("/api/episodes?sort=goal&tag=later"))
    state = client.app.state.index.peek()
    assert state.version == version + 1 and len(state.items) == 26


def test_changed_status_rebuilds_the_index(client, store):
    assert "ep-00002" in ids(client.get("/api/episodes?sort=goal&status=unrated&limit=500"))
    store.put(make_episode(2, tag="alpha", status="rated", models=MODELS[2]))  # re-rated
    assert "ep-00002" not in ids(client.get("/api/episodes?sort=goal&status=unrated&limit=500"))
    assert "ep-00002" in ids(client.get("/api/episodes?sort=goal&status=rated&limit=500"))


def test_old_index_is_rebuilt_in_the_background(store):
    index = SummaryIndex(store, max_age=0.0)
    first = index.get()
    replaced = make_episode(1, tag="renamed", status="rated", models=MODELS[1])  # same id and status
    store.put(replaced)
    assert index.get() is first  # served at once; a rebuild starts behind it
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and index.peek() is first:
        time.sleep(0.02)
    rebuilt = index.peek()
    assert rebuilt is not None and any(s.id == "ep-00001" and s.tag == "renamed" for s in rebuilt.items)


# -- the command --------------------------------------------------------------------------------------------


def test_view_help():
    from sotopia_env.cli.main import app

    r = CliRunner().invoke(app, ["view", "--help"])
    assert r.exit_code == 0 and "--store" in r.output and "--port" in r.output and "127.0.0.1" in r.output


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    st = SQLiteStore(f"sqlite:///{tmp_path / 'cli.db'}")
    st.put_many(sample_episodes())
    st.close()
    return st.url


def test_view_serves_on_loopback(monkeypatch, sqlite_url):
    import uvicorn

    from sotopia_env.cli.main import app

    seen: dict[str, Any] = {}
    monkeypatch.setattr(
        uvicorn.Server, "run", lambda srv, sockets: seen.update(host=srv.config.host, app=srv.config.app)
    )
    r = CliRunner().invoke(app, ["view", "--store", sqlite_url, "--port", str(free_port())])
    assert r.exit_code == 0, r.output
    assert seen["host"] == "127.0.0.1" and "serving" in r.output
    with TestClient(seen["app"], base_url=LOOPBACK) as c:
        assert c.get("/api/episodes").json()["total"] == 24
        assert c.get("/api/episodes", headers={"Host": "evil.example.com"}).status_code == 400  # DNS rebinding


def test_view_port_in_use(sqlite_url):
    from sotopia_env.cli.main import app

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = CliRunner().invoke(app, ["view", "--store", sqlite_url, "--port", str(busy.getsockname()[1])])
    assert r.exit_code == 1 and "in use" in r.output


def _escaped(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))
