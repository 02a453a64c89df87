"""One pooled ``aiohttp.ClientSession`` per event loop, for the backends that post to HTTP servers.

A session is made lazily inside the running loop. A small keeper task per session closes it when the loop shuts
down (``asyncio.run`` cancels it at the end), so nothing leaks across ``asyncio.run`` calls; ``aclose()``
closes the current loop's session early. Keep-alive connections are reused across turns and episodes; the
callers' own semaphores bound how many are open.
"""

from __future__ import annotations

import asyncio
from typing import Any

_keepers: set[asyncio.Task[None]] = set()  # strong references until each loop shuts down


class LoopSessions:
    """``await sessions.get()`` is the running loop's session, made with ``headers`` on first use."""

    def __init__(self, headers: dict[str, str] | None = None) -> None:
        self.headers = headers or {}
        self._by_loop: dict[asyncio.AbstractEventLoop, Any] = {}

    def __len__(self) -> int:
        return len(self._by_loop)

    async def get(self) -> Any:
        import aiohttp

        loop = asyncio.get_running_loop()
        session = self._by_loop.get(loop)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True)
            session = aiohttp.ClientSession(connector=connector, headers=self.headers)
            self._by_loop[loop] = session
            keeper = loop.create_task(self._close_at_shutdown(loop, session))
            _keepers.add(keeper)
            keeper.add_done_callback(_keepers.discard)
        return session

    async def aclose(self) -> None:
        """Close this loop's session now (it is otherwise closed when the loop shuts down)."""
        session = self._by_loop.pop(asyncio.get_running_loop(), None)
        if session is not None:
            await session.close()

    async def _close_at_shutdown(self, loop: asyncio.AbstractEventLoop, session: Any) -> None:
        try:
            await asyncio.Event().wait()  # until the loop shuts down and cancels us
        finally:
            await session.close()
            if self._by_loop.get(loop) is session:
                del self._by_loop[loop]
