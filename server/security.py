"""The server's gate, as ASGI middleware in front of every route and WebSocket.

- **Host.** Only the names the server is reached by (``served_hosts``: localhost, 127.0.0.1, [::1], the bound
  host, and ``serve --allowed-host``) are answered; any other ``Host`` is a ``400``, WebSockets included
  (Starlette's ``TrustedHostMiddleware``). A page on another domain that re-points its name at 127.0.0.1 (DNS
  rebinding) is refused this way.
- **Origin.** A WebSocket, or a POST/PUT/PATCH/DELETE, whose ``Origin`` is present is a ``403`` unless that origin
  is the server's own, compared by scheme, host and port (the request's scheme and ``Host``), or one the operator
  listed (``serve --allowed-origin``): a page on another port of the same machine (``http://localhost:3000``) is
  another origin (browsers send ``Origin`` on both; WebSockets are outside the same-origin policy).
  ``HostCheck`` is these two rules; the viewer (``sotopia-env view``) uses it too.
- **Token.** With a token set, every request needs it (``TokenCheck``): ``Authorization: Bearer <token>``, or the
  cookie the server sets when a browser first opens a page with ``?token=<token>`` (a browser cannot send a header
  when it follows a link or opens a WebSocket). Anything else is a ``401``; a WebSocket is refused with a 401
  before it is accepted. ``view`` off loopback uses it too.
- **Size.** A body over ``max_body_bytes`` is a ``413``; a body without ``Content-Length`` a ``411``
  (``BodyLimit``; the OpenEnv server uses it too).
- **Headers.** The viewer's Content-Security-Policy on every answer, widened only to let the server's own
  pages load their script from this origin and talk back to it (``script-src 'self'; connect-src 'self'``).
  No CORS headers: other origins' pages cannot read the API.

``bind_allowed`` is the start-up rule: serving without a token (``serve --no-token``) is for loopback only;
``start_token`` is the token a server starts with. Forwarded headers (``X-Forwarded-For``) are not read here: the
command that starts uvicorn trusts them only from ``serve --forwarded-allow-ips`` (``cli.listen.serve_on``).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
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
DEFAULT_PORTS = {"http": 80, "https": 443}
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
        f"refusing to listen on {host} without a token: anyone who can reach it could use it (read your episodes, "
        f"run models on your keys); drop --no-token (a token is made at start), pass --token or set {TOKEN_ENV} "
        "(or bind 127.0.0.1)"
    )


def start_token(host: str, token: str | None, no_token: bool, always: bool = True) -> tuple[str | None, bool]:
    """The token a server bound to ``host`` starts with, and whether it was made here (then its URL is printed):
    ``token`` or ``$SOTOPIA_ENV_TOKEN``; else, unless ``no_token``, a random one. Not ``always`` (``view``), a
    server on loopback has none unless ``token`` is given. ``ValueError``, one line, for a contradiction or a
    token-less public bind."""
    needed = always or not is_loopback(host)
    token = token or (os.environ.get(TOKEN_ENV) if needed else None) or None
    if no_token and token:
        raise ValueError(f"--no-token and a token (--token or ${TOKEN_ENV}) contradict each other; drop one")
    made = token is None and not no_token and needed
    token = secrets.token_urlsafe(24) if made else token
    refused = bind_allowed(host, token)
    if refused:
        raise ValueError(refused)
    return token, made


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


def origin_of(scheme: str, host: str) -> str | None:
    """``scheme://host:port`` (lower case, the port always written; IPv6 in brackets), from a scheme and a
    ``Host``-style ``host[:port]``; None when it is not an http(s) origin."""
    scheme = {"ws": "http", "wss": "https"}.get(scheme.lower(), scheme.lower())
    try:
        parts = urlsplit(f"//{host}")
        hostname, port = parts.hostname, parts.port
    except ValueError:
        return None
    if scheme not in DEFAULT_PORTS or not hostname or parts.username is not None or parts.path:
        return None
    shown = f"[{hostname}]" if ":" in hostname else hostname
    return f"{scheme}://{shown}:{port or DEFAULT_PORTS[scheme]}"


def normalized_origin(origin: str) -> str | None:
    """An ``Origin`` header's value (``scheme://host[:port]``) as ``origin_of`` writes it; None for anything else
    (``null``, a path, credentials, another scheme)."""
    scheme, sep, rest = origin.strip().partition("://")
    return origin_of(scheme, rest) if sep and rest else None


def served_origins(extra: Sequence[str] = ()) -> list[str]:
    """The origins the operator lists besides the server's own (``serve --allowed-origin``), normalized;
    ``ValueError`` names a malformed one."""
    origins = []
    for value in extra:
        origin = normalized_origin(value.rstrip("/"))
        if origin is None:
            raise ValueError(f"--allowed-origin {value!r}: give an origin, scheme://host[:port] (no path)")
        origins.append(origin)
    return list(dict.fromkeys(origins))


def forwarding_proxies(values: Sequence[str]) -> list[str]:
    """The proxies whose ``X-Forwarded-For``/``-Proto`` are trusted (``serve --forwarded-allow-ips``): addresses
    or networks (``10.0.0.0/8``), as uvicorn takes them; ``ValueError`` names a malformed one."""
    proxies = []
    for value in values:
        for part in (p.strip() for p in value.split(",")):
            try:
                ipaddress.ip_network(part, strict=False)
            except ValueError:
                raise ValueError(
                    f"--forwarded-allow-ips {part!r}: give an IP address or a network (10.0.0.0/8)"
                ) from None
            proxies.append(part)
    return proxies


class HostCheck:
    """A foreign ``Host`` is a 400 (``TrustedHostMiddleware``, HTTP and WebSocket); a WebSocket or an unsafe
    method whose ``Origin`` is present and neither the server's own (scheme, host and port) nor one of
    ``origins`` is a 403. ``hosts``: as ``served_hosts`` gives them; ``origins``: as ``served_origins``."""

    def __init__(self, app: ASGIApp, hosts: Sequence[str] = LOOPBACK_HOSTS, origins: Sequence[str] = ()) -> None:
        self.app, self.hosts, self.origins = app, list(hosts), frozenset(served_origins(origins))
        self._trusted = TrustedHostMiddleware(self._check_origin, allowed_hosts=self.hosts, www_redirect=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._trusted(scope, receive, send)

    async def _check_origin(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" or (scope["type"] == "http" and scope["method"] in UNSAFE_METHODS):
            headers = {k.lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            origin = headers.get(b"origin")
            if origin is not None:
                own = origin_of(scope.get("scheme", "http"), headers.get(b"host", ""))
                given = normalized_origin(origin)
                if given is None or (given != own and given not in self.origins):
                    hint = "serve --allowed-origin ORIGIN accepts pages from another origin"
                    message = f"Origin {origin[:100]!r} is not this server's ({own}); {hint}"
                    return await _refuse(scope, receive, send, 403, message)
        await self.app(scope, receive, send)


class TokenCheck:
    """With a token, every HTTP request and WebSocket needs it (``Authorization: Bearer``, the cookie, or
    ``?token=``, which also sets the cookie); anything else is a 401. Without one (None), everything passes."""

    def __init__(self, app: ASGIApp, token: str | None = None) -> None:
        self.app, self.token = app, token or None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        given_in_query = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("token", [None])[0]
        if not self._authorized(headers, given_in_query):
            return await _refuse(scope, receive, send, 401, "a token is needed: Authorization: Bearer <token>")
        if given_in_query is None:
            return await self.app(scope, receive, send)
        cookie = f"{COOKIE}={self.token}; HttpOnly; SameSite=Strict; Path=/".encode("latin-1")

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"set-cookie", cookie)]
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    def _authorized(self, headers: dict[str, str], given_in_query: str | None) -> bool:
        assert self.token is not None
        scheme, _, bearer = headers.get("authorization", "").partition(" ")
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except Exception:  # http.cookies.CookieError: a malformed Cookie header carries no token
            pass
        candidates = [
            bearer.strip() if scheme.lower() == "bearer" else None,
            cookie[COOKIE].value if COOKIE in cookie else None,
            given_in_query,
        ]
        return any(c is not None and hmac.compare_digest(c.encode(), self.token.encode()) for c in candidates)


class BodyLimit:
    """A POST/PUT/PATCH body over ``max_body_bytes`` (by its ``Content-Length``) is a 413, one sent without a
    ``Content-Length`` (chunked) a 411: nothing is read from it."""

    def __init__(self, app: ASGIApp, max_body_bytes: int = DEFAULT_MAX_BODY) -> None:
        self.app, self.max_body_bytes = app, max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH"):
            headers = {k.lower(): v for k, v in scope.get("headers", [])}
            length = headers.get(b"content-length")
            if length is None and headers.get(b"transfer-encoding"):
                return await _refuse(scope, receive, send, 411, "send the body with a Content-Length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
                message = f"the body is over the {self.max_body_bytes}-byte limit"
                return await _refuse(scope, receive, send, 413, message)
        await self.app(scope, receive, send)


class Gate:
    """Host and Origin (``HostCheck``), then the token (``TokenCheck``), the body's size (``BodyLimit``) and the
    headers; ``.app`` is the app."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None = None,
        max_body_bytes: int = DEFAULT_MAX_BODY,
        hosts: Sequence[str] = LOOPBACK_HOSTS,
        origins: Sequence[str] = (),
    ) -> None:
        self.app, self.token, self.max_body_bytes = app, token or None, max_body_bytes
        inner = TokenCheck(BodyLimit(self._with_headers, max_body_bytes), self.token)
        self._checked = HostCheck(inner, hosts, origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._checked(scope, receive, send)

    async def _with_headers(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers if scope["type"] == "http" else send)


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
