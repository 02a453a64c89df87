"""Each combination played once, however many drivers run the same batch on one store.

A driver claims a combination in the store just before it plays it: a lease with a time-to-live
(``SET NX PX`` in Redis, a ``claims`` row in SQLite), renewed while it plays and released once the episode
is stored (or its play failed). Another driver skips a combination that is claimed or already stored, and
takes over a claim whose lease expired (its driver died), or at once when that driver was a process of this
host that no longer runs (a batch SIGKILLed and resumed on one machine need not wait out the lease).
``run_batch`` does this for every batch, so ``benchmark``, the pipeline's stages and Ray workers all go through
the same claim. A driver on another machine that shares a hostname with this one (two containers given the
same name) would look gone: give machines distinct hostnames.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal

from sotopia_env.episodes.store import EpisodeStore, StoreUnavailable

DEFAULT_LEASE_SECONDS = 60.0
Outcome = Literal["ours", "held", "done"]


def new_owner() -> str:
    """This driver's name in the store: host, process and a random part (two drivers never share it)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def gone_from_this_host(holder: str) -> bool:
    """True when ``holder`` (a ``new_owner`` name) is a process of this host that no longer runs: its leases
    need not be waited out (a SIGKILLed driver resumed on the same machine). Another host's is never gone."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit() or int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # it exists (another user's process, say)
        return False
    return False


def supports_claims(store: EpisodeStore) -> bool:
    return all(callable(getattr(store, name, None)) for name in ("claim", "renew_claims", "release_claim"))


@dataclass
class Claims:
    """One driver's leases under one tag; ``kept_alive`` renews them every third of the lease."""

    store: EpisodeStore
    tag: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    owner: str = field(default_factory=new_owner)
    held: set[str] = field(default_factory=set)

    @property
    def poll_seconds(self) -> float:
        """How often a combination held by another driver is looked at again."""
        return min(2.0, max(0.05, self.lease_seconds / 4))

    async def take(self, key: str, expected: str | None) -> Outcome:
        """Claim ``key`` unless it is claimed by a live driver or its stored status is no longer ``expected``."""
        claim = self.store.claim  # type: ignore[attr-defined]
        try:
            outcome: Outcome = await asyncio.to_thread(
                claim, self.tag, key, self.owner, self.lease_seconds, expected, gone_from_this_host
            )
        except StoreUnavailable:
            # The store is down: play on, as the batch does (finished episodes are retried, then spilled);
            # exactly-once needs the store, so this one is played unclaimed.
            return "ours"
        if outcome == "ours":
            self.held.add(key)
        return outcome

    async def release(self, key: str) -> None:
        self.held.discard(key)
        with contextlib.suppress(Exception):  # an unreleased lease only expires: never worth failing a batch
            await asyncio.to_thread(self.store.release_claim, self.tag, key, self.owner)  # type: ignore[attr-defined]

    async def renew(self) -> None:
        """Extend every held lease. A lease already lost (this driver stalled past it) is not taken back: the
        driver that took it over plays the combination too, and both store it."""
        if self.held:
            renew = self.store.renew_claims  # type: ignore[attr-defined]
            await asyncio.to_thread(renew, self.tag, sorted(self.held), self.owner, self.lease_seconds)

    def of(self, key: str, expected: str | None) -> ComboClaim:
        return ComboClaim(self, key, expected)

    @contextlib.asynccontextmanager
    async def kept_alive(self) -> AsyncIterator[Claims]:
        """Renew the held leases in the background while the body runs."""

        async def loop() -> None:
            while True:
                await asyncio.sleep(self.lease_seconds / 3)
                with contextlib.suppress(Exception):  # a store fault: the next renewal tries again
                    await self.renew()

        task = asyncio.create_task(loop())
        try:
            yield self
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


@dataclass
class ComboClaim:
    """The claim ``run_episode`` takes on one combination (inside its concurrency slot) and releases once the
    episode is stored. ``outcome`` says why it was not taken: ``held`` by a live driver, or ``done``."""

    claims: Claims
    key: str
    expected: str | None
    outcome: Outcome | None = None

    async def take(self) -> bool:
        self.outcome = await self.claims.take(self.key, self.expected)
        return self.outcome == "ours"

    async def release(self) -> None:
        await self.claims.release(self.key)
