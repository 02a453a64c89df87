"""Shared fixtures. Embedded-model tests are marked ``model``.

Redis tests use the server at ``REDIS_URL``. When it is unset and ``redis-server`` is on PATH, the session
starts a throwaway server on a free loopback port (no persistence) and sets ``REDIS_URL`` to it; when neither
is there, the Redis tests skip loudly.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("SOTOPIA_SHARED", REPO.parent / "shared"))
_throwaway_redis: subprocess.Popen | None = None
_EXIT_STATUS = pytest.StashKey[int]()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_redis_server(port: int, workdir: str, *extra: str) -> subprocess.Popen:
    """A real ``redis-server`` on 127.0.0.1:``port`` with its files in ``workdir``, answering PING on return."""
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", workdir, "--save", "", *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return process
        except OSError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"redis-server on port {port} did not answer within 10 s")


def pytest_configure(config: pytest.Config) -> None:
    global _throwaway_redis
    if os.environ.get("REDIS_URL") or shutil.which("redis-server") is None:
        return
    port = free_port()
    _throwaway_redis = start_redis_server(port, tempfile.mkdtemp(prefix="sotopia-test-redis-"), "--appendonly", "no")
    os.environ["REDIS_URL"] = f"redis://127.0.0.1:{port}/0"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if _throwaway_redis is not None:
        _throwaway_redis.terminate()
        _throwaway_redis.wait(timeout=10)
    if "triton" in sys.modules and _EXIT_STATUS in config.stash:
        # transformers' modeling_utils imports torch._dynamo, which imports triton (a dependency of xgrammar) when
        # it is installed; triton's nanobind bindings then print ~60 lines of "nanobind: leaked ..." while the
        # interpreter shuts down. Everything is reported and written by now: leave without that noise.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(config.stash[_EXIT_STATUS])


def pytest_report_header(config: pytest.Config) -> str:
    if _throwaway_redis is not None:
        return f"redis: started a throwaway redis-server for this session at {os.environ['REDIS_URL']}"
    if os.environ.get("REDIS_URL"):
        return f"redis: REDIS_URL={os.environ['REDIS_URL']}"
    return "redis: REDIS_URL is unset and redis-server is not on PATH: the Redis tests will be SKIPPED"


@pytest.fixture(scope="session")
def embedded_model_path() -> str:
    """The embedded SmolLM2-135M, pulled into the cache on first use (about a minute, once)."""
    from sotopia_env.embedded_models import resolve_model_path

    return resolve_model_path("smollm2-135m", progress=False)


@pytest.fixture(scope="session")
def library():
    from sotopia_env.library import load_library

    return load_library()


@pytest.fixture
def two_friends(library):
    """A setup whose relationship is ``friend``."""
    from sotopia_env.sampler import eligible_setups

    scenario = next(
        s for s in sorted(library.scenarios.values(), key=lambda s: s.id) if s.relationship.name == "friend"
    )
    return eligible_setups(scenario, library)[0]


@pytest.fixture
def setup_at():
    """Build a setup for a scenario whose relationship is overridden (for visibility tests)."""

    def build(library, relationship: str):
        from sotopia_env.episode_setup import EpisodeSetup
        from sotopia_env.profiles import Relationship

        scenario = sorted(library.scenarios.values(), key=lambda s: s.id)[0]
        scenario = scenario.model_copy(update={"relationship": Relationship.parse(relationship), "constraints": None})
        chars = sorted(library.characters.values(), key=lambda c: c.id)[:2]
        return EpisodeSetup(scenario=scenario, characters=chars)

    return build


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer llama with random weights (peaked logits: greedy choices are far from ties) and a 300-token
    byte-level BPE tokenizer, saved as a model dir."""
    from tiny_model import make_tiny_model

    corpus = ['Hello, how are you today? {"action_type": "speak", "argument": "hi there"}'] * 5
    path = tmp_path_factory.mktemp("tiny-llama")
    make_tiny_model(
        path, corpus, vocab_size=320, hidden=32, heads=2, kv_heads=1, pad_token="<|im_end|>", max_positions=512,
        initializer_range=0.2,
    )  # fmt: skip
    return path


# -- headless Chromium for the browser tests (Debian's chromium, or $CHROMIUM; never Playwright's download) ----

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
def page(chromium):
    """A page of headless Chromium (system Chromium driven by the ``playwright`` package); skips without them."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the browser test needs the 'playwright' package (pip install playwright)"
    )
    with sync_api.sync_playwright() as p:
        try:
            browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        except sync_api.Error as exc:
            pytest.skip(f"headless Chromium at {chromium} would not start: {str(exc).splitlines()[0]}")
        try:
            yield browser.new_page()
        finally:
            browser.close()
