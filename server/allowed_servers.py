"""Which model servers a request may name: the server's API keys go only where its operator said.

The server calls a model server with its own key (``$SOTOPIA_API_KEY`` or ``$OPENAI_API_KEY``), so a request
that could name any ``api_base`` could collect that key with one call. ``AllowedModelServers`` holds what the
operator listed: ``serve --api-base`` (the default servers, which a request without ``api_base`` gets) and
``serve --allow-api-base URL_PREFIX``. Every URL of a request's ``api_base`` must fall under one of them, or the
request is refused before anything is queued or called.

A URL falls under a prefix when scheme, host, port and credentials are the same and its path is the prefix's path
or below it: ``http://gpu1:8000/v1`` covers ``http://gpu1:8000/v1`` and ``http://gpu1:8000/v1/``, not
``http://gpu1:8000/v10``, ``http://gpu1:8000.evil.example/v1`` or ``http://x@evil.example/v1``. A URL with a query,
a fragment or a ``..`` segment is never covered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from sotopia_env.backends.endpoints import ApiBase, ModelServers

DEFAULT_PORTS = {"http": 80, "https": 443}
HINT = "the operator lists the model servers a request may name with serve --api-base or --allow-api-base URL_PREFIX"


def _server(parts: SplitResult) -> tuple[str, str | None, int | None, str | None, str | None]:
    scheme = parts.scheme.lower()
    return scheme, parts.hostname, parts.port or DEFAULT_PORTS.get(scheme), parts.username, parts.password


def covered_by(url: str, prefix: str) -> bool:
    """Whether ``url`` falls under ``prefix`` (see the module docstring)."""
    try:
        target, allowed = urlsplit(url), urlsplit(prefix)
        same_server = _server(target) == _server(allowed)
    except ValueError:  # a port that is not a number
        return False
    if not same_server or target.query or target.fragment or ".." in target.path.split("/"):
        return False
    base = allowed.path.rstrip("/")
    return target.path.rstrip("/") == base or target.path.startswith(base + "/")


@dataclass(frozen=True)
class AllowedModelServers:
    """``default``: ``serve --api-base`` (None: each spec's provider). ``prefixes``: ``--allow-api-base``. A request
    may name servers under either."""

    default: ModelServers | None = None
    prefixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, default: ApiBase, prefixes: ApiBase | Sequence[str] = None) -> AllowedModelServers:
        """From the operator's values (servers, a URL, a comma list, or a list); ``ValueError`` for a bad URL."""
        allowed = ModelServers.parse(prefixes)
        return cls(ModelServers.parse(default), allowed.urls if allowed else ())

    @property
    def allowed(self) -> list[str]:
        return [*(self.default.urls if self.default else ()), *self.prefixes]

    def for_request(self, api_base: ModelServers | None) -> ModelServers | None:
        """The servers a request's episodes call: its ``api_base`` when every URL of it is allowed, the default when
        it names none; else ``ValueError``, one line that names the URL and the option."""
        if api_base is None:
            return self.default
        for url in api_base.urls:
            if not any(covered_by(url, prefix) for prefix in self.allowed):
                raise ValueError(f"api_base: {url[:200]!r} is not a model server this server may call; {HINT}")
        return api_base
