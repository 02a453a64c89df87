"""Helpers for the server's tests: the server on a free loopback port (in a thread, or as a ``sotopia-env serve``
process), a scripted model server for its agents, and waiting for a simulation to end."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from conftest import free_port
from loopback_openai import LoopbackOpenAI, Reply

SPEAK = '{"action_type": "speak", "argument": "Could we split it evenly?"}'


@contextmanager
def scripted_models(delay_s: float = 0.0) -> Iterator[LoopbackOpenAI]:
    """A model server whose every reply is one spoken line (after ``delay_s``)."""
    with LoopbackOpenAI(lambda body: Reply(SPEAK, delay_s=delay_s)) as srv:
        yield srv


@contextmanager
def server_thread(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a thread; yields its base URL."""
    import uvicorn

    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=20)


def serve_process(port: int, store: str, *extra: str, log: Any = None, token: str | None = None) -> subprocess.Popen:
    """``sotopia-env serve`` as its own process (``--token token`` when given; else as started by default, with a
    token it makes and prints: ``printed_url``), answering /api/health (200, or 401 without the token) on return."""
    cmd = [
        sys.executable,
        "-c",
        "from sotopia_env.cli.main import app; app()",
        "serve",
        "--port",
        str(port),
        "--store",
        store,
        *(["--token", token] if token else []),
        *extra,
    ]
    process = subprocess.Popen(cmd, stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sotopia-env serve exited with {process.returncode}")
        try:
            headers = {"Authorization": f"Bearer {token}"} if token else None
            answer = httpx.get(f"http://127.0.0.1:{port}/api/health", headers=headers, timeout=1)
            if answer.status_code in ((200,) if token or "--no-token" in extra else (200, 401)):
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("sotopia-env serve did not answer within 60 s")


@contextmanager
def serving(port: int, store: str, *extra: str, log_path: Path, token: str | None = None) -> Iterator[str]:
    """``serve_process`` for the length of a with-block, its output kept in ``log_path``; yields what it printed
    at start (``printed_url`` finds the URL in it)."""
    with log_path.open("w") as log:
        process = serve_process(port, store, *extra, log=log, token=token)
        try:
            yield log_path.read_text()
        finally:
            process.kill()
            process.wait(timeout=10)


def printed_url(output: str) -> str:
    """The URL with its token that ``serve`` printed at start (what a user opens)."""
    found = re.search(r"http://\S+/\?token=\S+", output)
    assert found, f"serve printed no URL with a token: {output!r}"
    return found.group(0)


def wait_until_ended(client: httpx.Client, sim_id: str, timeout_s: float = 60.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = client.get(f"/api/simulations/{sim_id}").json()
        if status["status"] in ("done", "failed", "cancelled"):
            return status
        time.sleep(0.1)
    raise AssertionError(f"simulation {sim_id} did not end within {timeout_s} s: {status}")
