"""The server's gate, as one ASGI middleware in front of every route and WebSocket.

- **Host.** Only the names the server is reached by (``served_hosts``: localhost, 127.0.0.1, [::1], the bound
  host, and ``serve --allowed-host``) are answered; any other ``Host`` is a ``400``, WebSockets included
  (Starlette's ``TrustedHostMiddleware``). A page on another domain that re-points its name at 127.0.0.1 (DNS
  rebinding) is refused this way.
- **Origin.** A WebSocket, or a POST/PUT/PATCH/DELETE, whose ``Origin`` is present and is not one of those hosts
  is a ``403`` (browsers send ``Origin`` on both; WebSockets are outside the same-origin policy).
  ``HostCheck`` is these two rules; the viewer (``sotopia-env view``) uses it alone.
- **Token.** With a token set, every request needs it: ``Authorization: Bearer <token>``, or the cookie the
  server sets when a browser first opens a page with ``?token=<token>`` (a browser cannot send a header when
  it follows a link or opens a WebSocket). Anything else is a ``401``; a WebSocket is refused with a 401
  before it is accepted.
- **Size.** A body over ``max_body_bytes`` is a ``413``; a body without ``Content-Length`` a ``411``.
- **Headers.** The viewer's Content-Security-Policy on every answer, widened only to let the server's own
  pages load their script from this origin and talk back to it (``script-src 'self'; connect-src 'self'``).
  No CORS headers: other origins' pages cannot read the API.

``bind_allowed`` is the start-up rule: serving without a token (``serve --no-token``) is for loopback only.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.middleware.trustedhost import TrustedHostMiddleware

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
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
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
        f"drop --no-token (a token is made at start), pass --token or set {TOKEN_ENV} (or bind 127.0.0.1)"
    )


def served_hosts(bound: str | None = None, extra: Sequence[str] = ()) -> list[str]:
    """The ``Host`` names answered: loopback's, the bound host's (unless a wildcard address), and ``extra``
    (``serve --allowed-host``: a name, an address, ``*.example.com``, or ``*`` for any). ``ValueError`` names a
    malformed one."""
    names = list(LOOPBACK_HOSTS)
    if bound is not None and bound not in WILDCARD_ADDRESSES:
        names.append(f"[{bound.strip('[]')}]" if ":" in bound else bound)
    for name in extra:
        name = name.strip()
        if not name or "*" in name[1:] or (name.startswith("*") and name != "*" and not name.startswith("*.")):
            raise ValueError(f"--allowed-host {name!r}: give a host name, an address, '*.example.com' or '*'")
        if any(c in name for c in "/@ ") or (":" in name and not name.startswith("[")):
            raise ValueError(f"--allowed-host {name!r}: a host name without scheme, port or path ([::1] for IPv6)")
        names.append(name)
    return list(dict.fromkeys(n.lower() for n in names))


def host_matches(host: str, patterns: Sequence[str]) -> bool:
    """Whether ``host`` (lower case, IPv6 in brackets) is one of ``patterns``, as ``TrustedHostMiddleware``
    matches them (``*`` any, ``*.example.com`` any subdomain)."""
    return any(p == "*" or host == p or (p.startswith("*.") and host.endswith(p[1:])) for p in patterns)


def origin_allowed(origin: str, hosts: Sequence[str]) -> bool:
    """Whether a request's ``Origin`` header names one of ``hosts`` (``null`` and non-http(s) origins never do)."""
    try:
        parts = urlsplit(origin)
        hostname = parts.hostname
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not hostname:
        return False
    return host_matches(f"[{hostname}]" if ":" in hostname else hostname, hosts)


class HostCheck:
    """A foreign ``Host`` is a 400 (``TrustedHostMiddleware``, HTTP and WebSocket); a WebSocket or an unsafe
    method whose ``Origin`` is present and foreign is a 403. ``hosts``: as ``served_hosts`` gives them."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str] = LOOPBACK_HOSTS) -> None:
        self.app, self.hosts = app, list(hosts)
        self._trusted = TrustedHostMiddleware(self._check_origin, allowed_hosts=self.hosts, www_redirect=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._trusted(scope, receive, send)

    async def _check_origin(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" or (scope["type"] == "http" and scope["method"] in UNSAFE_METHODS):
            origin = next((v.decode("latin-1") for k, v in scope.get("headers", []) if k.lower() == b"origin"), None)
            if origin is not None and not origin_allowed(origin, self.hosts):
                hint = "start the server with --allowed-host NAME to serve pages from another name"
                return await _refuse(scope, receive, send, 403, f"Origin {origin[:100]!r} is not this server's; {hint}")
        await self.app(scope, receive, send)


class Gate:
    """Host and Origin (``HostCheck``), then the token, the body's size and the headers; ``.app`` is the app."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY,
        hosts: Sequence[str] = LOOPBACK_HOSTS,
    ) -> None:
        self.app, self.token, self.max_body_bytes = app, token or None, max_body_bytes
        self._checked = HostCheck(self._gate, hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._checked(scope, receive, send)

    async def _gate(self, scope: Scope, receive: Receive, send: Send) -> None:
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
