"""End to end in headless Chromium: the list, a click into an episode, its transcript and scores.

Chromium and Playwright as ``conftest.py``'s ``page`` fixture finds them; skips, saying what is missing, without them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="the viewer needs the 'view' extra (fastapi)")
pytest.importorskip("uvicorn", reason="the viewer needs the 'view' extra (uvicorn)")

from episode_fixtures import make_episode  # noqa: E402
from server_harness import server_thread  # noqa: E402

from sotopia_env.episodes.sqlite_store import SQLiteStore  # noqa: E402
from sotopia_env.server.viewer import create_app  # noqa: E402


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """The viewer over a small SQLite store, served by uvicorn on a free loopback port in a thread."""
    store = SQLiteStore(f"sqlite:///{tmp_path_factory.mktemp('viewer') / 'episodes.db'}")
    store.put_many([make_episode(i, tag="browser", status=("rated", "unrated", "failed")[i % 3]) for i in range(9)])
    with server_thread(create_app(store)) as base:
        yield base
    store.close()


def test_list_click_into_episode_shows_transcript_and_scores(server, page):
    page.goto(server + "/?status=rated&sort=goal&seat=1")
    rows = page.locator("table.episodes tbody tr")
    assert rows.count() == 3
    assert page.locator("h1").inner_text() == "Episodes"

    link = rows.first.locator("a.episode-link")
    episode_id = link.inner_text()
    link.click()
    page.wait_for_url(f"**/episodes/{episode_id}")

    transcript = page.locator("ol.transcript li")
    assert transcript.count() == 8
    assert "Thanks for making time for this" in transcript.nth(0).inner_text()
    assert page.locator("ol.transcript li.nonverbal").count() == 1
    assert page.locator("ol.transcript li.leave").count() == 1
    assert page.locator(".termination").inner_text() == "everyone_left"

    scores = page.locator("table.scores")
    assert scores.is_visible()
    assert scores.locator("tbody tr").count() == 8  # seven dimensions and overall
    assert "scored" in scores.locator(".reason").first.inner_text()
    assert scores.locator("strong.score").count() == 14


def test_filters_and_unrated_episode(server, page):
    page.goto(server + "/")
    page.select_option("select[name=status]", "unrated")
    page.click("button[type=submit]")
    page.wait_for_url("**status=unrated**")
    rows = page.locator("table.episodes tbody tr")
    assert rows.count() == 3
    rows.first.locator("a.episode-link").click()
    page.wait_for_load_state()
    assert "Unrated: evaluator output invalid" in page.locator(".rating-error").inner_text()
