"""A scriptable OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benchmarks.

    with LoopbackOpenAI(lambda body: Reply('{"action_type": "none", "argument": ""}')) as srv:
        backend = LiteLLMBackend("loopback", api_base=srv.base_url)
        ...
        srv.requests  # every request body received, in arrival order

Serves ``POST /v1/chat/completions`` and ``GET /v1/models`` from a ``ThreadingHTTPServer`` in a daemon
thread (one thread per connection, so hundreds of simultaneous requests are fine). The responder maps a
request body to a ``Reply`` (or a plain string, the reply text): text content, an HTTP error status, and/or
a delay before answering. Usage counts whitespace-separated words. No pytest imports: benchmarks use it too.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """What the server answers: ``text`` with status 200, or an error ``status`` with ``error`` as its message."""

    text: str = ""
    status: int = 200
    error: str | None = None
    delay_s: float = 0.0
    completion_tokens: int | None = None  # default: words in ``text``
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def fail(cls, status: int, message: str = "", delay_s: float = 0.0) -> Reply:
        return cls(status=status, error=message or f"loopback error {status}", delay_s=delay_s)


Responder = Callable[[dict[str, Any]], "Reply | str"]


def _words(content: Any) -> int:
    if isinstance(content, str):
        return len(content.split())
    if isinstance(content, list):  # content parts
        return sum(_words(part.get("text", "")) for part in content if isinstance(part, dict))
    return 0


def _default_responder(body: dict[str, Any]) -> Reply:
    return Reply("ok")


class LoopbackOpenAI:
    """The server; a context manager. ``base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(
        self,
        responder: Responder | None = None,
        latency_s: float = 0.0,
        model_ids: tuple[str, ...] = ("loopback",),
        request_queue_size: int = 1024,
        port: int = 0,  # 0: a free port
    ) -> None:
        self.responder: Responder = responder or _default_responder
        self.latency_s = latency_s
        self.model_ids = model_ids
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections = 0  # TCP connections accepted (keep-alive reuse shows as fewer connections than calls)
        self._server = _Server(("127.0.0.1", port), _Handler, request_queue_size)
        self._server.owner = self
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A copy of every chat-completions request body received so far."""
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """The HTTP headers (names lower-cased) of each chat-completions request, in the order of ``requests``."""
        with self._lock:
            return list(self._headers)

    def reset(self) -> None:
        with self._lock:
            self._requests.clear()
            self._headers.clear()
            self.max_in_flight = self.in_flight

    def start(self) -> LoopbackOpenAI:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="loopback-openai", daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()  # wakes handlers that are sleeping out a delay
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> LoopbackOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _done(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any], dict[str, str]]:
        reply = self.responder(body)
        if isinstance(reply, str):
            reply = Reply(reply)
        self._stop.wait(self.latency_s + reply.delay_s)
        if reply.status != 200:
            kind = "rate_limit_error" if reply.status == 429 else "invalid_request_error"
            error = {"message": reply.error, "type": kind, "param": None, "code": str(reply.status)}
            return reply.status, {"error": error}, reply.headers
        prompt_tokens = sum(_words(m.get("content")) for m in body.get("messages", []) if isinstance(m, dict))
        completion_tokens = len(reply.text.split()) if reply.completion_tokens is None else reply.completion_tokens
        payload = {
            "id": f"chatcmpl-loopback-{time.monotonic_ns()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", self.model_ids[0]),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": reply.text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
        return 200, payload, reply.headers


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    owner: LoopbackOpenAI

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], queue_size: int) -> None:
        self.request_queue_size = queue_size
        super().__init__(address, handler)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as OpenAI clients expect
    disable_nagle_algorithm = True  # otherwise each reply's second write waits ~40 ms for an ACK
    timeout = 60  # an idle keep-alive connection is dropped after this
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def setup(self) -> None:
        super().setup()
        owner = self.server.owner
        with owner._lock:
            owner.connections += 1

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
            self.close_connection = True

    def do_GET(self) -> None:
        owner = self.server.owner
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            models = [{"id": m, "object": "model", "created": 0, "owned_by": "loopback"} for m in owner.model_ids]
            self._send(200, {"object": "list", "data": models})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found", "code": "404"}})

    def do_POST(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found", "code": "404"}})
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "body is not JSON", "type": "invalid_request_error", "code": "400"}})
            return
        owner._record(body, {k.lower(): v for k, v in self.headers.items()})
        try:
            status, payload, headers = owner._answer(body)
        except Exception as exc:  # a broken responder is a 500, not a hung client
            status, payload, headers = 500, {"error": {"message": repr(exc), "type": "server_error"}}, {}
        finally:
            owner._done()
        self._send(status, payload, headers)
