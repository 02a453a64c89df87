"""The server's gate, as one ASGI middleware in front of every route and WebSocket.

- **Token.** With a token set, every request needs it: ``Authorization: Bearer <token>``, or the cookie the
  server sets when a browser first opens a page with ``?token=<token>`` (a browser cannot send a header when
  it follows a link or opens a WebSocket). Anything else is a ``401``; a WebSocket is refused with a 401
  before it is accepted.
- **Size.** A body over ``max_body_bytes`` is a ``413``; a body without ``Content-Length`` a ``411``.
- **Headers.** The viewer's Content-Security-Policy on every answer, widened only to let the server's own
  pages load their script from this origin and talk back to it (``script-src 'self'; connect-src 'self'``).
  No CORS headers: other origins' pages cannot read the API.

``bind_allowed`` is the start-up rule: a host other than loopback needs a token.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_ENV = "SOTOPIA_ENV_TOKEN"
COOKIE = "sotopia_env_token"
DEFAULT_MAX_BODY = 1 << 20
CSP = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_allowed(host: str, token: str | None) -> str | None:
    """None when the server may listen on ``host``; else the one-line reason it may not."""
    if is_loopback(host) or token:
        return None
    return (
        f"refusing to listen on {host} without a token: anyone who can reach it could run models on your keys; "
        f"pass --token or set {TOKEN_ENV} (or bind 127.0.0.1)"
    )


class Gate:
    def __init__(self, app: ASGIApp, token: str | None = None, max_body_bytes: int = DEFAULT_MAX_BODY) -> None:
        self.app, self.token, self.max_body_bytes = app, token or None, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        given_in_query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [None])[0]
        if self.token is not None and not self._authorized(headers, given_in_query):
            return await _refuse(scope, receive, send, 401, "a token is needed: Authorization: Bearer <token>")
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            length = headers.get("content-length")
            if length is None and headers.get("transfer-encoding"):
                return await _refuse(scope, receive, send, 411, "send the body with a Content-Length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
                return await _refuse(
                    scope, receive, send, 413, f"the body is over the {self.max_body_bytes}-byte limit"
                )
        set_cookie = self.token is not None and given_in_query is not None

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
                if set_cookie:
                    cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/"
                    message["headers"].append((b"set-cookie", cookie.encode("latin-1")))
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _authorized(self, headers: dict[str, str], given_in_query: str | None) -> bool:
        assert self.token is not None
        scheme, _, bearer = headers.get("authorization", "").partition(" ")
        cookie = SimpleCookie(headers.get("cookie", ""))
        candidates = [
            bearer.strip() if scheme.lower() == "bearer" else None,
            cookie[COOKIE].value if COOKIE in cookie else None,
            given_in_query,
        ]
        return any(c is not None and hmac.compare_digest(c.encode(), self.token.encode()) for c in candidates)


async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, message: str) -> None:
    body = json.dumps({"detail": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if scope["type"] == "websocket":
        await receive()  # websocket.connect: refused before it is accepted
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            return
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "http.response.start", "status": status, "headers": headers + SECURITY_HEADERS})
    await send({"type": "http.response.body", "body": body})
