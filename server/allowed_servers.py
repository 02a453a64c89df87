"""Which model servers a request may reach: the server's API keys go only where its operator said.

The server calls a model server with its own key (``$SOTOPIA_API_KEY`` or ``$OPENAI_API_KEY``), so a request
that could name any ``api_base`` could collect that key with one call. ``AllowedModelServers`` holds what the
operator listed: ``serve --api-base`` (the default servers, which a request without ``api_base`` gets),
``serve --allow-api-base URL_PREFIX``, and ``serve --allow-provider NAME`` (a litellm provider whose own endpoint
may be called). Every URL of a request's ``api_base`` must fall under one of the first two, and every model spec
must reach a listed server: a spec without an ``api_base`` goes to its provider's default endpoint
(``ollama/x``: ``localhost:11434``), which only ``--allow-provider`` lists. Anything else is refused (a 403)
before anything is queued or called.

A URL is normalised first (``normalized``: RFC 3986's percent-decoding of unreserved characters and
``remove_dot_segments``), and the normalised URL is the one called: ``/v1/%2e%2e/zz`` is ``/zz``. A URL that cannot
be normalised safely (a percent sign still encoding something, such as ``%2F``; a backslash) is refused.

A URL falls under a prefix when scheme, host, port and credentials are the same and its path is the prefix's path
or below it: ``http://gpu1:8000/v1`` covers ``http://gpu1:8000/v1`` and ``http://gpu1:8000/v1/``, not
``http://gpu1:8000/v10``, ``http://gpu1:8000.evil.example/v1`` or ``http://x@evil.example/v1``. A URL with a query
or a fragment is never covered.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit, urlunsplit

from sotopia_env.backends.endpoints import ApiBase, ModelServers

DEFAULT_PORTS = {"http": 80, "https": 443}
UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
PROVIDER_NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
HINT = "the operator lists the model servers a request may name with serve --api-base or --allow-api-base URL_PREFIX"


def _decoded(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in UNRESERVED else match.group(0)


def remove_dot_segments(path: str) -> str:
    """RFC 3986, section 5.2.4: ``/a/b/../c/./d`` is ``/a/c/d``; nothing climbs above the root."""
    output: list[str] = []
    for segment in path.split("/")[1:] if path.startswith("/") else path.split("/"):
        if segment == "..":
            if output:
                output.pop()
        elif segment != ".":
            output.append(segment)
    ends_in_dir = path.endswith(("/.", "/..")) or path in (".", "..")
    return "/" + "/".join(output) + ("/" if ends_in_dir and output else "")


def normalized(url: str) -> str:
    """``url`` with its path normalised (unreserved characters percent-decoded, dot segments removed); ``ValueError``
    (one line, naming the URL) for one that cannot be normalised safely."""
    if "\\" in url or any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise ValueError(f"api_base: {url[:200]!r} holds a backslash or a control character")
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018  (ValueError for a port that is not a number)
    except ValueError:
        raise ValueError(f"api_base: {url[:200]!r} has a port that is not a number in 0..65535") from None
    if "%" in parts.netloc:
        raise ValueError(f"api_base: {url[:200]!r} has a percent-encoded host")
    path = re.sub(r"%([0-9A-Fa-f]{2})", _decoded, parts.path)
    if "%" in path:  # %2F, %5C, %25 and the like: servers and clients disagree on what they mean
        raise ValueError(f"api_base: {url[:200]!r} percent-encodes a character its path may not hold encoded")
    path = remove_dot_segments(path) if path else path
    return urlunsplit((parts.scheme.lower(), parts.netloc, path, parts.query, parts.fragment))


def _server(parts: SplitResult) -> tuple[str, str | None, int | None, str | None, str | None]:
    scheme = parts.scheme.lower()
    return scheme, parts.hostname, parts.port or DEFAULT_PORTS.get(scheme), parts.username, parts.password


def covered_by(url: str, prefix: str) -> bool:
    """Whether ``url`` falls under ``prefix``, both normalised (see the module docstring)."""
    try:
        target, allowed = urlsplit(normalized(url)), urlsplit(normalized(prefix))
        same_server = _server(target) == _server(allowed)
    except ValueError:  # a port that is not a number, a URL that cannot be normalised
        return False
    if not same_server or target.query or target.fragment:
        return False
    base = allowed.path.rstrip("/")
    return target.path.rstrip("/") == base or target.path.startswith(base + "/")


def provider_of(spec: str) -> str | None:
    """The litellm provider a model spec names (``ollama/llama3``: ``ollama``); None when it names none."""
    from sotopia_env.specs import ModelSpec, SpecError

    try:
        provider = ModelSpec.parse(spec).provider
    except SpecError:
        return None
    return provider.strip().lower() if provider else None


def reaches_a_model_server(spec: str) -> bool:
    """Whether an agent or judge built from ``spec`` calls a model server: not a rule agent, a human seat, a
    registered judge, ``none``, code (``module:Class``, checked on its own) or a model run here."""
    from sotopia_env.agents.specs import NO_MODEL_SPECS, AgentSpec
    from sotopia_env.evaluators import evaluator_names
    from sotopia_env.specs import EvaluatorSpec, SpecError

    try:
        judge = EvaluatorSpec.parse(spec)
        agent = AgentSpec.parse(spec.strip())
    except SpecError:
        return False  # no spec at all: it is refused where it is read, in one line
    if judge.is_none or judge.key in NO_MODEL_SPECS or judge.key in evaluator_names():
        return False
    return agent.calls_model and agent.model is not None and not agent.model.is_local


class NotListed(ValueError):
    """A model server the operator did not list; the message names the URL or the spec, and the option."""


@dataclass(frozen=True)
class AllowedModelServers:
    """``default``: ``serve --api-base`` (None: each spec's provider). ``prefixes``: ``--allow-api-base``.
    ``providers``: ``--allow-provider``. A request may reach servers under any of them, and no other."""

    default: ModelServers | None = None
    prefixes: tuple[str, ...] = ()
    providers: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls, default: ApiBase, prefixes: ApiBase | Sequence[str] = None, providers: Iterable[str] = ()
    ) -> AllowedModelServers:
        """From the operator's values (servers, a URL, a comma list, or a list; provider names); ``ValueError`` for a
        bad URL or name."""
        allowed = ModelServers.parse(prefixes)
        names = frozenset(p.strip().lower() for p in providers)
        bad = sorted(n for n in names if not PROVIDER_NAME.fullmatch(n))
        if bad:
            raise ValueError(f"--allow-provider {bad[0]!r}: give a litellm provider name (openai, anthropic, ...)")
        return cls(ModelServers.parse(default), allowed.urls if allowed else (), names)

    @property
    def allowed(self) -> list[str]:
        return [*(self.default.urls if self.default else ()), *self.prefixes]

    def for_request(self, api_base: ModelServers | None) -> ModelServers | None:
        """The servers a request's episodes call: its ``api_base``, normalised, when every URL of it is allowed;
        the default when it names none; else ``NotListed``, one line that names the URL and the option."""
        if api_base is None:
            return self.default
        urls = []
        for url in api_base.urls:
            try:
                urls.append(normalized(url))
            except ValueError as exc:
                raise NotListed(f"{exc}; {HINT}") from None
            if not any(covered_by(urls[-1], prefix) for prefix in self.allowed):
                raise NotListed(f"api_base: {url[:200]!r} is not a model server this server may call; {HINT}")
        return ModelServers.parse(urls)

    def check_spec(self, field: str, spec: str, api_base: ModelServers | None) -> None:
        """``NotListed`` (one line naming the field, the spec and the options) when ``spec``, called with
        ``api_base`` (what ``for_request`` gave), would reach a model server the operator did not list: without
        an ``api_base``, a spec that goes to its provider's own endpoint, unless ``--allow-provider`` names it."""
        if api_base is not None or not reaches_a_model_server(spec):
            return
        provider = provider_of(spec) or _guessed_provider(spec, self.providers)
        if provider is not None and provider in self.providers:
            return
        where = f"provider {provider!r}'s default endpoint" if provider else "its provider's default endpoint"
        allow = f"serve --allow-provider {provider}" if provider else "serve --allow-provider NAME"
        raise NotListed(
            f"{field}: {spec.strip()[:200]!r} would call {where}, which the operator did not list; name a listed "
            f"server in api_base (serve --api-base, --allow-api-base) or ask the operator for {allow}"
        )


def _guessed_provider(spec: str, allowed: frozenset[str]) -> str | None:
    """litellm's provider for a spec without a prefix (``gpt-4o-mini``: ``openai``), asked only where some provider
    is allowed (litellm takes seconds to import); None when it names none."""
    if not allowed:
        return None
    import os

    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as the litellm backend: no fetch at import
    from litellm import get_llm_provider

    from sotopia_env.specs import ModelSpec

    try:  # a spec that is none is no provider's either (SpecError)
        return str(get_llm_provider(model=ModelSpec.parse(spec).name.strip())[1]).lower()
    except Exception:  # litellm names no provider for it: it would not be called, and it is not allowed either
        return None
