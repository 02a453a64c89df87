"""The server in real headless Chromium: a person plays a seat to the end on its play page while the live page
follows the same simulation. Chromium and Playwright as ``conftest.py``'s ``page`` fixture finds them."""

from __future__ import annotations

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server needs the 'view' extra (fastapi)")
pytest.importorskip("uvicorn", reason="the server needs the 'view' extra (uvicorn)")

from server_harness import SPEAK, scripted_models, server_thread, wait_until_ended  # noqa: E402

from sotopia_env.episodes.sqlite_store import SQLiteStore  # noqa: E402
from sotopia_env.server import create_server  # noqa: E402

LINES = ["Hello, can we talk about the drums?", "Maybe evenings only, before eight?", "Thanks, that works."]


def test_a_person_plays_a_seat_to_the_end_while_the_live_page_follows(page, tmp_path) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'episodes.db'}")
    body = {"scenario": "accommodation-drum-practice", "agents": ["human", "loopback"], "evaluator": "rule-based"}
    with scripted_models(delay_s=0.2) as models, server_thread(create_server(store, turn_timeout_s=60)) as base:
        client = httpx.Client(base_url=base, timeout=30)
        started = client.post("/api/simulations", json=body | {"max_turns": 6, "api_base": models.base_url}).json()
        sim_id, (name, play) = started["id"], next(iter(started["human_seats"].items()))
        watcher = page.context.browser.new_page()
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
    stored = store.get(done["episode_id"])
    assert [t.action.argument for t in stored.turns if t.agent == name] == LINES
    assert len(shown) == len(stored.turns) == 6
    assert all(line in text for line, text in zip(LINES, shown[::2], strict=True))
    assert all(SPEAK.split('"argument": "')[1].rstrip('"}') in text for text in shown[1::2])
