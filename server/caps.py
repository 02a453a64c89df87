"""What an HTTP request may ask for at most, by the operator's own settings.

The limits of a job's fields are declared once (``episodes.job_fields``, ``BenchmarkSpec``) and are the CLI's: a
benchmark's ``concurrency`` up to 100,000, ``episodes_per_scenario`` up to 10,000, ``max_turns`` up to 1000. A
server must not let a token holder ask for more than its operator allows, so ``HttpCaps`` caps them lower for
HTTP: a benchmark's ``concurrency`` at most ``serve --concurrency``, ``max_turns`` at most ``serve --max-turns``,
``episodes_per_scenario`` at most ``serve --max-episodes-per-scenario``. Over a cap is a 422 naming the field and
the cap; the OpenAPI document declares the caps as the fields' maxima (``openapi.describe``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from pydantic import BaseModel

from sotopia_env.episodes.job_fields import DEFAULT_CONCURRENCY, HTTP_EPISODES_PER_SCENARIO, HTTP_MAX_TURNS

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class HttpCaps:
    concurrency: int = DEFAULT_CONCURRENCY
    max_turns: int = HTTP_MAX_TURNS
    episodes_per_scenario: int = HTTP_EPISODES_PER_SCENARIO

    def fields(self) -> dict[str, tuple[int, str]]:
        """Each capped field: its cap and the ``serve`` option that sets it."""
        return {
            "concurrency": (self.concurrency, "--concurrency"),
            "max_turns": (self.max_turns, "--max-turns"),
            "episodes_per_scenario": (self.episodes_per_scenario, "--max-episodes-per-scenario"),
        }

    def applied(self, body: M) -> M:
        """``body`` (a request model) within the caps: a field it leaves to its default is lowered to the cap; one
        it sets above it is ``CapExceeded``, one line naming the field and the cap."""
        lowered = {}
        for name, (cap, option) in self.fields().items():
            value = getattr(body, name, None)
            if value is None or value <= cap:
                continue
            if name in body.model_fields_set:
                raise CapExceeded(f"{name}: {value} is over this server's cap of {cap} (serve {option})")
            lowered[name] = cap
        return body.model_copy(update=lowered) if lowered else body


class CapExceeded(ValueError):
    """A request field above the server's cap; the message names the field, the cap and the option."""
