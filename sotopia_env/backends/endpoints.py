"""Several servers behind one model: the servers as one validated value, which one a call goes to, and which
ones are resting.

``ModelServers`` is the model servers a run calls (an ``api_base``), parsed once where the user gave them (the
CLI's repeatable ``--api-base``, a YAML config, an HTTP body): one URL, a comma list, or a list of either, each
an http(s) URL, each once, in order. It flows unchanged from there to the ``EndpointPool`` of each backend
(``resolve.resolve_backend``, ``remote.RemoteBackend``); ``ModelServers.parse`` passes one through as it is.

``EndpointPool`` picks, for each call, the server with the fewest requests outstanding (ties: the one picked
least). A server that fails ``fail_threshold`` calls in a row (refused connection, timeout, 5xx) is taken out for
a cool-down that doubles on each further failure (up to ``max_cooldown_s``); after it, one call at a time tries
it until one succeeds. A retry avoids the server its call just failed on. When every server is resting, the one
back soonest is used: a pool of one behaves as the plain client did.

``endpoint_share(index, count)`` pins what is resolved inside it to worker ``index`` of ``count``'s own servers
(``share_of``): Ray workers pinned this way each talk to their own vLLM replica.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from pydantic import ConfigDict, RootModel, ValidationError, field_validator, model_validator

# (worker index, worker count) for ``endpoint_share``; None: every server.
_SHARE: ContextVar[tuple[int, int] | None] = ContextVar("sotopia_env_endpoint_share", default=None)
MAX_URL_CHARS = 2000


class ModelServers(RootModel[tuple[str, ...]]):
    """One or more OpenAI-compatible servers' base URLs (see the module docstring). ``str()`` is the comma list;
    JSON is the list of URLs, and a comma-separated string is read as well."""

    model_config = ConfigDict(frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, ModelServers):
            return value.root
        parts = [value] if isinstance(value, str) else value
        if not isinstance(parts, (list, tuple)) or not all(isinstance(p, str) for p in parts):
            return value  # pydantic says what is wrong with it
        urls = [url.strip() for part in parts for url in part.split(",")]
        return tuple(dict.fromkeys(url for url in urls if url))

    @field_validator("root")
    @classmethod
    def _http_urls(cls, urls: tuple[str, ...]) -> tuple[str, ...]:
        if not urls:
            raise ValueError("api_base: no server URL")
        for url in urls:
            if len(url) > MAX_URL_CHARS or not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
                raise ValueError(f"api_base {url[:200]!r}: not an http:// or https:// URL")
        return urls

    @classmethod
    def parse(cls, value: ApiBase | Sequence[str]) -> ModelServers | None:
        """``value`` (servers, a URL, a comma list, a list of those) as servers; None for none. Raises ``ValueError``
        (one line, naming the URL) for a URL that is not http(s)."""
        if value is None or isinstance(value, ModelServers):
            return value
        if not "".join(value).replace(",", "").strip():
            return None
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            raise ValueError(exc.errors()[0]["msg"].removeprefix("Value error, ")) from None

    @property
    def urls(self) -> tuple[str, ...]:
        return self.root

    def __str__(self) -> str:
        return ",".join(self.root)

    def __repr__(self) -> str:
        return f"ModelServers({str(self)!r})"


# What every ``api_base`` parameter takes: servers parsed at the edge, or (from Python) a URL or a comma list.
ApiBase = ModelServers | str | None


def share_of(urls: Sequence[str], index: int, count: int) -> list[str]:
    """Worker ``index`` of ``count``'s servers among ``urls``: with at least as many servers as workers, a
    disjoint slice (``urls[index::count]``, so every server is used); with fewer, one server, dealt round-robin."""
    if len(urls) <= 1 or count <= 1:
        return list(urls)
    if len(urls) >= count:
        return list(urls[index::count])
    return [urls[index % len(urls)]]


@contextlib.contextmanager
def endpoint_share(index: int, count: int) -> Iterator[None]:
    """Within this block, an ``api_base`` of several servers resolves to worker ``index`` of ``count``'s share."""
    if not 0 <= index < count:
        raise ValueError(f"endpoint share: worker index {index} is not in 0..{count - 1}")
    token = _SHARE.set((index, count))
    try:
        yield
    finally:
        _SHARE.reset(token)


def pinned(servers: ModelServers | None) -> ModelServers | None:
    """``servers`` cut to the current ``endpoint_share``; as they are outside one."""
    share = _SHARE.get()
    if share is None or servers is None:
        return servers
    return ModelServers(tuple(share_of(servers.urls, *share)))


@dataclass
class Endpoint:
    """One server and what the pool knows of it."""

    url: str | None
    outstanding: int = 0  # calls sent and not yet answered
    picks: int = 0  # calls ever sent (breaks ties, so equal servers take turns)
    failures: int = 0  # server failures in a row
    resting_until: float = 0.0  # monotonic time its cool-down ends


class EndpointPool:
    """Least-outstanding choice over ``urls`` with a cool-down for failing servers; see the module docstring."""

    def __init__(
        self,
        urls: Sequence[str | None],
        *,
        fail_threshold: int = 3,
        cooldown_s: float = 5.0,
        max_cooldown_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.endpoints = [Endpoint(url) for url in (urls or [None])]
        self.fail_threshold = fail_threshold
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self._clock = clock

    def available(self, avoid: Endpoint | None = None) -> list[Endpoint]:
        """The servers not resting (one back from a rest takes one call at a time), without ``avoid``."""
        now = self._clock()
        return [
            e
            for e in self.endpoints
            if e.resting_until <= now and e is not avoid and (e.failures < self.fail_threshold or not e.outstanding)
        ]

    def acquire(self, avoid: Endpoint | None = None) -> Endpoint:
        """The server for the next call (counted as outstanding until ``release``); ``avoid`` only if it is the
        only one up, and a resting one only if all are resting."""
        up = self.available(avoid) or self.available()
        if up:
            chosen = min(up, key=lambda e: (e.outstanding, e.picks))
        else:
            chosen = min(self.endpoints, key=lambda e: e.resting_until)
        chosen.outstanding += 1
        chosen.picks += 1
        return chosen

    def release(self, endpoint: Endpoint, server_failed: bool) -> None:
        """The call sent to ``endpoint`` is over; ``server_failed``: it failed in a way that blames the server."""
        endpoint.outstanding -= 1
        if not server_failed:
            endpoint.failures = 0
            endpoint.resting_until = 0.0
            return
        endpoint.failures += 1
        over = endpoint.failures - self.fail_threshold
        if over >= 0:
            rest = min(self.max_cooldown_s, self.cooldown_s * 2**over)
            endpoint.resting_until = max(endpoint.resting_until, self._clock() + rest)

    def __len__(self) -> int:
        return len(self.endpoints)
