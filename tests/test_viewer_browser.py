"""End to end in headless Chromium: the list, a click into an episode, its transcript and scores.

Needs the ``playwright`` Python package and a system Chromium (Debian's ``chromium``
at /usr/bin/chromium, or $CHROMIUM); Playwright's own browser download is never
used. Skips, saying what is missing, where either is absent.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="the viewer needs the 'view' extra (fastapi)")
uvicorn = pytest.importorskip("uvicorn", reason="the viewer needs the 'view' extra (uvicorn)")
sync_api = pytest.importorskip(
    "playwright.sync_api", reason="the browser test needs the 'playwright' package (pip install playwright)"
)

from episode_fixtures import make_episode  # noqa: E402

from sotopia_env.episodes.sqlite_store import SQLiteStore  # noqa: E402
from sotopia_env.episodes.viewer import create_app  # noqa: E402

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    for candidate in (os.environ.get("CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    path = chromium_path()
    if path is None:
        pytest.skip("headless Chromium not found (apt-get install chromium, or set $CHROMIUM): browser test skipped")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """The viewer over a small SQLite store, served by uvicorn on a free loopback port in a thread."""
    store = SQLiteStore(f"sqlite:///{tmp_path_factory.mktemp('viewer') / 'episodes.db'}")
    store.put_many([make_episode(i, tag="browser", status=("rated", "unrated", "failed")[i % 3]) for i in range(9)])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(create_app(store), host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the viewer's uvicorn server did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(timeout=10)
    store.close()


@pytest.fixture(scope="module")
def page(chromium):
    with sync_api.sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        except sync_api.Error as exc:
            pytest.skip(f"headless Chromium at {chromium} would not start: {str(exc).splitlines()[0]}")
        try:
            yield browser.new_page()
        finally:
            browser.close()


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
