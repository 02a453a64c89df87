"""The server in real headless Chromium: ``sotopia-env serve`` started as a user starts it (a token made, its URL
printed), the browser opens that URL, then a person plays a seat to the end on its play page while the live page
follows the same simulation. Chromium and Playwright as ``conftest.py``'s ``page`` fixture finds them."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server needs the 'view' extra (fastapi)")
pytest.importorskip("uvicorn", reason="the server needs the 'view' extra (uvicorn)")

from conftest import free_port  # noqa: E402
from server_harness import SPEAK, printed_url, scripted_models, serving, wait_until_ended  # noqa: E402

from sotopia_env.episodes.sqlite_store import SQLiteStore  # noqa: E402

LINES = ["Hello, can we talk about the drums?", "Maybe evenings only, before eight?", "Thanks, that works."]


def test_a_person_plays_a_seat_to_the_end_while_the_live_page_follows(page, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("SOTOPIA_ENV_TOKEN", raising=False)
    db, port, log_path = f"sqlite:///{tmp_path / 'episodes.db'}", free_port(), tmp_path / "serve.log"
    body = {"scenario": "accommodation-drum-practice", "agents": ["human", "loopback"], "evaluator": "rule-based"}
    base = f"http://127.0.0.1:{port}"
    with scripted_models(delay_s=0.2) as models:
        options = ("--api-base", models.base_url, "--turn-timeout", "60", "--library-dir", str(tmp_path / "lib"))
        with serving(port, db, *options, log_path=log_path) as printed:
            url = printed_url(printed)
            page.goto(base + "/")
            assert "a token is needed" in page.content()  # 401 until the printed URL is opened
            page.goto(url)  # sets the cookie every later page, fetch and WebSocket of this browser sends
            assert page.locator("h1").inner_text() == "Episodes"
            token = parse_qs(urlsplit(url).query)["token"][0]
            client = httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30)
            started = client.post("/api/simulations", json=body | {"max_turns": 6}).json()
            sim_id, (name, play) = started["id"], next(iter(started["human_seats"].items()))
            watcher = page.context.browser.new_page()  # a browser of its own: it opens the printed URL too
            watcher.goto(url)
            watcher.goto(base + f"/simulations/{sim_id}")

            page.goto(base + play)
            for line in LINES:  # seat 1 moves on turns 1, 3 and 5
                page.wait_for_selector("#move:not([hidden])", timeout=30_000)
                assert "Your turn" in page.locator("#state").inner_text()
                page.select_option("#action_type", "speak")
                page.fill("#argument", line)
                page.click("#send")
            page.wait_for_selector("#play[data-ended='1']", timeout=30_000)
            assert "The episode has ended (done)" in page.locator("#state").inner_text()
            assert "could we split it evenly" in page.locator("#view").inner_text().lower()  # the partner, as seen

            watcher.wait_for_selector("#live[data-ended='1']", timeout=30_000)
            shown = watcher.locator("#turns li").all_inner_texts()
            done = wait_until_ended(client, sim_id)
            client.close()
    stored = SQLiteStore(db).get(done["episode_id"])
    assert [t.action.argument for t in stored.turns if t.agent == name] == LINES
    assert len(shown) == len(stored.turns) == 6
    assert all(line in text for line, text in zip(LINES, shown[::2], strict=True))
    assert all(SPEAK.split('"argument": "')[1].rstrip('"}') in text for text in shown[1::2])
