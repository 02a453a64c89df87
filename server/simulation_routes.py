"""``/api/simulations``: start (``202``), read, cancel, stream, and the human seats' moves.

The stream (``/api/simulations/{id}/stream``, a WebSocket) sends ``{"type": "turn", "turn": ...}`` for each turn
(the same JSON as the stored episode's turns), then ``{"type": "rating", ...}``, then ``{"type": "end", ...}``,
and closes. A viewer that joins late gets the turns so far first; any number may watch one simulation.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, HTTPException, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from sotopia_env.actions import AgentAction
from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.server.clients import admitted
from sotopia_env.server.openapi import NOT_FOUND, REFUSED, error
from sotopia_env.server.requests import RequestRefused, SimulationRequest
from sotopia_env.server.service_check import check_model_services
from sotopia_env.server.simulations import Event, Simulation, Simulations, episode_id_of, events_of
from sotopia_env.validation import field_problem

router = APIRouter(prefix="/api", tags=["simulations"])


def simulations_of(request: Request | WebSocket) -> Simulations:
    return request.app.state.simulations


def _stored_summary(sim_id: str, log: EpisodeLog) -> dict[str, Any]:
    return {
        "id": sim_id,
        "status": "done",
        "scenario": log.setup.scenario.id,
        "agents": {a.name: a.model for a in log.agents},
        "tag": log.tag,
        "turns": len(log.turns),
        "episode_id": log.id,
        "episode_status": log.status,
        "human_seats": {},
        "error": log.error,
    }


async def _found(request: Request | WebSocket, sim_id: str) -> Simulation | EpisodeLog:
    found = await simulations_of(request).find(sim_id)
    if found is None:
        dropped = simulations_of(request).dropped.get(sim_id)
        raise HTTPException(404, dropped or f"no simulation {sim_id!r}")
    return found


@router.post(
    "/simulations",
    status_code=202,
    summary="Start a simulation; 202 with its id (a durable promise)",
    responses=REFUSED,
)
async def start(request: Request, body: SimulationRequest) -> JSONResponse:
    sims = simulations_of(request)
    client = admitted(request)
    try:
        body, chosen = await sims.planned(body)
        await check_model_services(chosen)
    except RequestRefused as exc:
        raise HTTPException(exc.status, str(exc)) from None
    sim = await sims.submit(body, chosen, client)
    links = {
        "self": f"/api/simulations/{sim.id}",
        "stream": f"/api/simulations/{sim.id}/stream",
        "page": f"/simulations/{sim.id}",
    }
    return JSONResponse({**sim.summary(), "links": links}, status_code=202, headers={"Location": links["self"]})


@router.get("/simulations", summary="Simulations this server holds in memory (queued, running, recently ended)")
def listing(request: Request) -> list[dict[str, Any]]:
    return [s.summary() for s in sorted(simulations_of(request).live.values(), key=lambda s: s.created)]


@router.get(
    "/simulations/{sim_id}",
    summary="A simulation's status",
    description="A cancelled simulation (DELETE) is gone: 404, whose detail says it was cancelled.",
    responses=NOT_FOUND,
)
async def status(request: Request, sim_id: str) -> dict[str, Any]:
    found = await _found(request, sim_id)
    return found.summary() if isinstance(found, Simulation) else _stored_summary(sim_id, found)


@router.delete(
    "/simulations/{sim_id}",
    summary="Cancel a queued or running simulation (nothing is stored)",
    description="Stops it, drops it from the queue and forgets it: the answer is its last status (cancelled), its "
    "stream's viewers get an end event (cancelled), and from then on GET and DELETE answer 404. One that has ended "
    "(its episode stored) cannot be cancelled: 409.",
    responses={**NOT_FOUND, 409: error("The simulation has ended; its episode is stored.")},
)
async def cancel(request: Request, sim_id: str) -> dict[str, Any]:
    found = await _found(request, sim_id)
    if isinstance(found, Simulation):
        sim = await simulations_of(request).cancel(sim_id)
        if sim is None:  # another DELETE took it meanwhile
            await _found(request, sim_id)  # a 404 saying it was cancelled (unless its episode was stored)
        elif sim.status == "cancelled":
            return sim.summary()
    raise HTTPException(409, f"simulation {sim_id!r} has ended; its episode is {episode_id_of(sim_id)!r}")


@router.websocket("/simulations/{sim_id}/stream")
async def stream(websocket: WebSocket, sim_id: str) -> None:
    found = await simulations_of(websocket).find(sim_id)
    if found is None:
        await websocket.close(code=4404, reason=f"no simulation {sim_id!r}")
        return
    await websocket.accept()
    try:
        if isinstance(found, EpisodeLog):
            for event in events_of(found):
                await websocket.send_json(event)
        else:
            await _follow(websocket, found)
        await websocket.close()
    except (WebSocketDisconnect, RuntimeError):  # the viewer went away
        return


async def _follow(websocket: WebSocket, sim: Simulation) -> None:
    """The events so far, then each new one as it happens, until the end."""
    queue: asyncio.Queue[Event] = asyncio.Queue()
    sent = list(sim.events)  # taken and subscribed with no await between: nothing is missed or sent twice
    sim.listeners.add(queue)
    try:
        for event in sent:
            await websocket.send_json(event)
        if sent and sent[-1]["type"] == "end":
            return
        while True:
            event = await queue.get()
            await websocket.send_json(event)
            if event["type"] == "end":
                return
    finally:
        sim.listeners.discard(queue)


def _seat(sim: Simulation | EpisodeLog, name: str):
    if not isinstance(sim, Simulation) or name not in sim.seats:
        raise HTTPException(404, f"no human seat {name!r} in this simulation")
    return sim.seats[name]


@router.get(
    "/simulations/{sim_id}/seats/{name}",
    summary="A human seat's own view: whose turn, what it sees",
    responses=NOT_FOUND,
)
async def seat_view(request: Request, sim_id: str, name: str) -> dict[str, Any]:
    sim = await _found(request, sim_id)
    view = _seat(sim, name).view()
    assert isinstance(sim, Simulation)
    return {**view, "simulation": sim.status, "episode_id": sim.episode_id if sim.status == "done" else None}


@router.post(
    "/simulations/{sim_id}/seats/{name}",
    summary="A human seat's move on its turn",
    responses={**NOT_FOUND, 409: error("It is not this seat's turn.")},
)
async def seat_move(request: Request, sim_id: str, name: str) -> dict[str, Any]:
    seat = _seat(await _found(request, sim_id), name)
    try:
        action = AgentAction.model_validate(await request.json())
    except ValidationError as exc:
        raise HTTPException(422, field_problem(exc)) from None
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        raise HTTPException(422, "the body must be JSON: {action_type, argument, to?}") from None
    if action.error is not None:
        raise HTTPException(422, "field 'error': not something a move may set")
    try:
        seat.submit(action)
    except ValueError as exc:
        raise HTTPException(409 if "not this seat's turn" in str(exc) else 422, str(exc)) from None
    return {"accepted": True}
