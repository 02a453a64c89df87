"""Helpers for the server's tests: the server on a free loopback port (in a thread, or as a ``sotopia-env serve``
process), a scripted model server for its agents, a server that records every request sent to it, and waiting for
a simulation to end."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class Recorder(ThreadingHTTPServer):
    """Every request it got: ``(method, path, headers)``, headers' names in lower case. It answers each with a 404."""

    daemon_threads = True
    seen: list[tuple[str, str, dict[str, str]]]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Recording(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _answer(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _answer


@contextmanager
def recording_server() -> Iterator[Recorder]:
    """A server on a free loopback port that records every request (where a key would go if it were called)."""
    srv = Recorder(("127.0.0.1", 0), _Recording)
    srv.seen = []
    thread = threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


@contextmanager
def server_thread(app: Any) -> Iterator[str]:
    """``app`` served by uvicorn on a free loopback port in a thread, as ``serve`` serves it (no forwarded headers
    trusted); yields its base URL."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio", proxy_headers=False
    )
    srv = uvicorn.Server(config)
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


def serve_process(
    port: int, store: str, *extra: str, log: Any = None, token: str | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen:
    """``sotopia-env serve`` as its own process (``--token token`` when given; else as started by default, with a
    token it makes and prints: ``printed_url``), answering /api/health (200, or 401 without the token) on return.
    ``env``: variables set for it on top of this process's."""
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
    process = subprocess.Popen(
        cmd, stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
    )
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
def serving(
    port: int, store: str, *extra: str, log_path: Path, token: str | None = None, env: dict[str, str] | None = None
) -> Iterator[str]:
    """``serve_process`` for the length of a with-block, its output kept in ``log_path``; yields what it printed
    at start (``printed_url`` finds the URL in it)."""
    with log_path.open("w") as log:
        process = serve_process(port, store, *extra, log=log, token=token, env=env)
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


def websocket_status(
    base: str, path: str, host: str | None = None, origin: str | None = None, cookie: str | None = None
) -> tuple[int, bytes]:
    """The status line and body a raw WebSocket upgrade gets (a client library cannot send a foreign Host)."""
    port = int(base.rsplit(":", 1)[1])
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host or f'127.0.0.1:{port}'}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
        "Sec-WebSocket-Version: 13",
        *([f"Origin: {origin}"] if origin else []),
        *([f"Cookie: {cookie}"] if cookie else []),
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
            if answer.startswith(b"HTTP/1.1 101"):
                break
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), body
