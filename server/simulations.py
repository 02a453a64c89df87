"""The server's simulations: a durable queue in the store, one task per simulation, and the events it streams.

A ``202`` is a promise, so an accepted request is written to the store's queue (``queue_put``) before it is
answered, with the permissions it was accepted under (``--allow-code-agents``), and dropped only once its episode
is stored (or it is cancelled). At start the server takes up every request still queued: one whose episode is
already stored (the server died between storing and dropping) is only dropped; the others are planned again under
the permissions they were accepted under *and* this server's (code agents only where both allow them; the model
servers this operator lists), and run, or fail with the reason. Each runs under a claim in the store
(``episodes.claims``, key = the simulation id), and its episode is stored under the id ``sim-<id>``: after a
``kill -9`` and a restart, or with two servers on one store, each accepted simulation is stored exactly once.

Model calls share the server's one cap with benchmarks (``model_calls.ModelCalls``, ``serve --concurrency``);
simulations themselves are bounded by ``--max-per-client``.

Every simulation plays through ``runner.run_episode``, the one play -> rate -> store path. Its events (each
turn, then the rating, then the end) are kept in memory for viewers that join late, and fanned out to the
WebSocket viewers attached now. A finished simulation that is no longer in memory is read back from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from sotopia_env.agents.base import Agent
from sotopia_env.episodes.claims import Claims, supports_claims
from sotopia_env.episodes.job_fields import DEFAULT_CONCURRENCY, HTTP_MAX_PER_CLIENT
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.episodes.plan import HUMAN
from sotopia_env.episodes.runner import run_episode
from sotopia_env.episodes.store import EpisodeStore
from sotopia_env.episodes.store_writer import StoreWriter
from sotopia_env.library import Library
from sotopia_env.server.allowed_servers import AllowedModelServers
from sotopia_env.server.browser_seat import DEFAULT_TURN_TIMEOUT, BrowserSeat
from sotopia_env.server.caps import CapExceeded, HttpCaps
from sotopia_env.server.model_calls import ModelCalls
from sotopia_env.server.requests import CODE_REFUSED, Plan, RequestRefused, SimulationRequest, plan
from sotopia_env.transcript import Turn

QUEUE = "simulations"
CLAIM_TAG = "__simulations__"  # claims only: no episode is stored under it
MAX_ENDED_IN_MEMORY = 1000  # ended simulations kept for late viewers; older ones are read back from the store
Status = Literal["queued", "running", "done", "failed", "cancelled"]
Event = dict[str, Any]


def episode_id_of(simulation_id: str) -> str:
    return f"sim-{simulation_id}"


def turn_event(turn: Turn, at: float | None = None) -> Event:
    """A turn as streamed: the stored turn's JSON, and ``at``, when it was played (Unix seconds; absent when it is
    read back from the store)."""
    event: Event = {"type": "turn", "turn": turn.model_dump(mode="json")}
    return event if at is None else event | {"at": at}


def closing_events(log: EpisodeLog) -> list[Event]:
    """The rating, then the end: what follows the turns of a finished simulation."""
    rating = log.rating.model_dump(mode="json") if log.rating is not None else None
    end = {"type": "end", "status": "done", "episode_id": log.id, "episode_status": log.status, "error": log.error}
    return [{"type": "rating", "rating": rating}, end]


def events_of(log: EpisodeLog) -> list[Event]:
    """A stored simulation's whole stream, as a viewer attached from the start would have received it."""
    return [turn_event(t) for t in log.turns] + closing_events(log)


@dataclass
class Simulation:
    id: str
    request: SimulationRequest
    plan: Plan | None  # None: refused when taken up again after a restart (``error`` says why); never started
    client: str = ""
    status: Status = "queued"
    created: float = field(default_factory=time.time)
    events: list[Event] = field(default_factory=list)
    listeners: set[asyncio.Queue[Event]] = field(default_factory=set)
    seats: dict[str, BrowserSeat] = field(default_factory=dict)  # human seats, by agent name
    task: asyncio.Task[None] | None = None
    episode_status: str | None = None
    error: str | None = None

    @property
    def episode_id(self) -> str:
        return episode_id_of(self.id)

    @property
    def ended(self) -> bool:
        return self.status in ("done", "failed", "cancelled")

    def publish(self, event: Event) -> None:
        self.events.append(event)
        for queue in self.listeners:
            queue.put_nowait(event)

    def summary(self) -> dict[str, Any]:
        chosen = self.plan
        return {
            "id": self.id,
            "status": self.status,
            "scenario": chosen.setup.scenario.id if chosen else self.request.scenario,
            "agents": dict(zip(chosen.setup.agent_names, chosen.specs, strict=True)) if chosen else {},
            "evaluator": chosen.evaluator if chosen else self.request.evaluator,
            "tag": self.request.tag,
            "turns": sum(e["type"] == "turn" for e in self.events),
            "episode_id": self.episode_id if chosen else None,
            "episode_status": self.episode_status,
            "human_seats": {
                n: f"/simulations/{self.id}/play/{quote(n)}" for n in (chosen.human_seats if chosen else [])
            },
            "error": self.error,
        }


class Simulations:
    """Accepts, queues, runs, streams and cancels simulations; their model calls and the benchmarks' take slots of
    one ``ModelCalls`` of ``concurrency``."""

    def __init__(
        self,
        store: EpisodeStore,
        library: Library,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        servers: AllowedModelServers = AllowedModelServers(),
        allow_code_agents: bool = False,
        turn_timeout_s: float = DEFAULT_TURN_TIMEOUT,
        max_per_client: int = HTTP_MAX_PER_CLIENT,
        caps: HttpCaps | None = None,
    ) -> None:
        self.store, self.library = store, library
        self.servers, self.allow_code_agents = servers, allow_code_agents
        self.turn_timeout_s, self.max_per_client = turn_timeout_s, max_per_client
        self.calls = ModelCalls(concurrency)
        self.caps = caps or HttpCaps(concurrency)
        self.live: dict[str, Simulation] = {}
        self.dropped: dict[str, str] = {}  # cancelled ones, or queued ones not run again: why (a 404 says it)
        self.claims = Claims(store, CLAIM_TAG) if supports_claims(store) else None
        self._renewing: contextlib.AbstractAsyncContextManager[Any] | None = None

    # -- accepting --------------------------------------------------------------------------------

    def active_of(self, client: str) -> int:
        return Counter(s.client for s in self.live.values() if not s.ended)[client]

    async def planned(self, request: SimulationRequest) -> tuple[SimulationRequest, Plan]:
        """``request`` within the caps, and its plan; ``RequestRefused`` (one line, its status) for one the server
        will not run. Nothing is recorded yet."""
        try:
            request = self.caps.applied(request)
        except CapExceeded as exc:
            raise RequestRefused(str(exc)) from None
        # in a thread: a spec's provider may take litellm's first import (seconds of a stalled loop)
        chosen = await asyncio.to_thread(plan, request, self.library, self.allow_code_agents, self.servers)
        return request, chosen

    async def submit(self, request: SimulationRequest, chosen: Plan, client: str = "") -> Simulation:
        """Record a planned request durably (with the permissions it is accepted under), then start it."""
        sim = Simulation(uuid.uuid4().hex[:16], request, chosen, client)
        record = {"request": request.model_dump(mode="json"), "client": client, "created": sim.created}
        record["allow_code_agents"] = self.allow_code_agents
        await asyncio.to_thread(self.store.queue_put, QUEUE, sim.id, json.dumps(record))
        self._start(sim)
        return sim

    async def resume(self) -> list[str]:
        """Take up what the store still has queued (a restart, a crash): returns the ids started again."""
        if self.claims is not None and self._renewing is None:
            self._renewing = self.claims.kept_alive()
            await self._renewing.__aenter__()
        queued = await asyncio.to_thread(self.store.queue_items, QUEUE)
        started = []
        for sim_id, body in queued.items():
            if sim_id in self.live:
                continue
            try:
                data = json.loads(body)
                request = SimulationRequest.model_validate(data["request"])
            except (ValueError, KeyError, TypeError) as exc:  # a record this version cannot read
                await asyncio.to_thread(self.store.queue_drop, QUEUE, sim_id)
                self.dropped[sim_id] = f"cannot run after a restart: its queued record is unreadable ({exc})"[:500]
                continue
            sim = Simulation(sim_id, request, None, data.get("client", ""), created=data.get("created", time.time()))
            try:  # planned again: the permissions it was accepted under and this server's, the operator's servers
                sim.plan = await asyncio.to_thread(self._replanned, request, data.get("allow_code_agents") is True)
            except RequestRefused as exc:  # code it may no longer load, a scenario that left the library, ...
                await asyncio.to_thread(self.store.queue_drop, QUEUE, sim_id)
                sim.status, sim.error = "failed", f"not run after a restart: {exc}"
                self.live[sim_id] = sim
                continue
            self._start(sim)
            started.append(sim_id)
        return started

    def _replanned(self, request: SimulationRequest, accepted_with_code: bool) -> Plan:
        allowed = self.allow_code_agents and accepted_with_code
        why = "it was accepted without --allow-code-agents" if self.allow_code_agents else CODE_REFUSED
        return plan(request, self.library, allowed, self.servers, code_refused=why)

    def _start(self, sim: Simulation) -> None:
        assert sim.plan is not None
        sim.seats = {name: BrowserSeat(self.turn_timeout_s) for name in sim.plan.human_seats}
        self._forget_old()
        self.live[sim.id] = sim
        sim.task = asyncio.create_task(self._run(sim), name=f"simulation {sim.id}")

    def _forget_old(self) -> None:
        """Keep at most ``MAX_ENDED_IN_MEMORY`` ended simulations (the oldest go: their episodes are stored)."""
        ended = [s for s in self.live.values() if s.ended and not s.listeners]
        for sim in sorted(ended, key=lambda s: s.created)[: max(0, len(ended) - MAX_ENDED_IN_MEMORY)]:
            del self.live[sim.id]

    # -- running ----------------------------------------------------------------------------------

    def _players(self, sim: Simulation) -> tuple[Any, list[Agent]]:
        """The judge and the agents of ``sim`` (its plan's; a human seat is its play page's), their model calls
        under the server's cap."""
        chosen = sim.plan
        assert chosen is not None

        def seat(name: str, spec: str) -> Agent | None:
            return sim.seats[name] if spec == HUMAN else None

        agents = chosen.seated(seat=seat)
        capped = [
            a if spec == HUMAN else self.calls.agent(spec, a) for a, spec in zip(agents, chosen.specs, strict=True)
        ]
        return self.calls.judge(chosen.evaluator, chosen.judge()), capped

    async def _stored(self, sim: Simulation) -> EpisodeLog | None:
        try:
            return await asyncio.to_thread(self.store.get, sim.episode_id)
        except KeyError:
            return None

    async def _run(self, sim: Simulation) -> None:
        claim = self.claims.of(sim.id, None) if self.claims is not None else None
        while claim is not None and not await claim.take():  # another server plays it: wait for it
            if await self._stored(sim) is not None:
                break
            await asyncio.sleep(self.claims.poll_seconds if self.claims else 1.0)
        try:
            log = await self._stored(sim)  # stored before a crash, or by another server: not played again
            if log is None:
                sim.status = "running"
                log = await self._play(sim)
                events = closing_events(log)
            else:
                events = events_of(log)  # its viewers get the whole stream all the same
            for event in events[:-1]:
                sim.publish(event)
            sim.status, sim.episode_status, sim.error = "done", log.status, log.error
            sim.publish(events[-1])
            await asyncio.to_thread(self.store.queue_drop, QUEUE, sim.id)
        except Exception as exc:  # the store refused the episode (it was spilled to a file), say
            sim.status, sim.error = "failed", f"{type(exc).__name__}: {exc}"
            sim.publish(
                {"type": "end", "status": "failed", "episode_id": None, "episode_status": None, "error": sim.error}
            )
        finally:
            if claim is not None:
                await claim.release()

    async def _play(self, sim: Simulation) -> EpisodeLog:
        assert sim.plan is not None
        request = sim.request
        job = dataclasses.replace(sim.plan.jobs[0], episode_id=sim.episode_id)
        writer = StoreWriter(self.store, request.tag)
        try:  # in a thread: a local model's first load imports torch and reads weights (seconds of a stalled loop)
            judge, agents = await asyncio.to_thread(self._players, sim)
        except Exception as exc:  # a spec that cannot be built: the episode fails with the reason, as in a batch
            judge, agents = None, _raising(exc)
        log = await run_episode(
            job,
            judge,
            writer,
            agents=agents,
            tag=request.tag,
            config=sim.plan.config(),
            on_turn=lambda turn: sim.publish(turn_event(turn, time.time())),
        )
        assert log is not None
        await asyncio.to_thread(writer.finish)
        return log

    # -- reading and cancelling ----------------------------------------------------------------------

    async def find(self, sim_id: str) -> Simulation | EpisodeLog | None:
        """The live simulation, else its stored episode (a simulation finished before a restart), else None."""
        if sim_id in self.live:
            return self.live[sim_id]
        try:
            return await asyncio.to_thread(self.store.get, episode_id_of(sim_id))
        except KeyError:
            return None

    async def cancel(self, sim_id: str) -> Simulation | None:
        """Stop a queued or running simulation, drop it from the queue, tell its viewers, and forget it (``find``
        then answers None, and ``dropped`` says why); an ended one is returned as it is."""
        sim = self.live.get(sim_id)
        if sim is None or sim.ended:
            return sim
        if sim.task is not None:
            sim.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sim.task
            if sim.ended:  # it ended (its episode stored) before the cancel reached it
                return sim
        await asyncio.to_thread(self.store.queue_drop, QUEUE, sim.id)
        sim.status = "cancelled"
        sim.publish({"type": "end", "status": "cancelled", "episode_id": None, "episode_status": None, "error": None})
        del self.live[sim_id]
        self.dropped[sim_id] = f"simulation {sim_id!r} was cancelled (DELETE); nothing was stored"
        for old in list(self.dropped)[: max(0, len(self.dropped) - MAX_ENDED_IN_MEMORY)]:
            del self.dropped[old]
        return sim

    async def close(self) -> None:
        """Stop every task; what is still queued stays in the store and runs at the next start."""
        tasks = [s.task for s in self.live.values() if s.task is not None and not s.task.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._renewing is not None:
            await self._renewing.__aexit__(None, None, None)
            self._renewing = None


def _raising(exc: Exception):
    def factory(spec: str, seat: int) -> Agent:
        raise exc

    return factory
