"""The server's own pages: a simulation watched live, a human seat's play page, ``/docs``, and their scripts.

Both pages render what is known when they load (the turns so far, or the seat's last view) and then follow the
simulation with a script from this origin (``server.scripts``). The play page shows only the seat's
own observation, as the env gave it to the seat: the visibility rules and the private messages hold for people
as for models.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import ChoiceLoader, DictLoader, Environment

from sotopia_env.episodes.log import EpisodeLog
from sotopia_env.server.scripts import LIVE_JS, PLAY_JS
from sotopia_env.server.simulations import Simulation, events_of
from sotopia_env.server.viewer.templates import environment

router = APIRouter(include_in_schema=False)
SCRIPTS = {"live.js": LIVE_JS, "play.js": PLAY_JS}
KIND_CLASS = {"non-verbal communication": "nonverbal"}

LIVE = """{% extends "base.html" %}{% block title %}Simulation {{ sim_id }}{% endblock %}{% block main %}
<div id="live" data-sim="{{ sim_id }}">
<h1>{{ scenario }} <span class="muted small">simulation {{ sim_id }}</span></h1>
<p>Status: <strong id="state">{{ status }}</strong></p>
<p class="muted small">{% for name, spec in agents.items() %}{{ name }}: {{ spec }}{% if not loop.last %} · {% endif %}
{% endfor %}</p>
{% if human_seats %}<p>Human seats: {% for name, link in human_seats.items() %}<a href="{{ link }}">{{ name }}</a>
{% endfor %}</p>{% endif %}
<h2>Transcript</h2>
<ol class="transcript" id="turns">{% for t in turns %}<li class="{{ t.kind }}"><span class="turn">#{{ t.turn }}</span>
<span class="who">{{ t.agent }}{% if t.to %} (to {{ t.to | join(", ") }}){% endif %}
<span class="kind">{{ t.action_type }}</span></span>
<span class="text">{{ t.argument }}</span></li>{% endfor %}</ol>
<h2>Rating</h2><p class="pre small" id="rating">{{ rating }}</p>
</div><script src="/static/live.js"></script>
{% endblock %}
"""

PLAY = """{% extends "base.html" %}{% block title %}{{ seat }} · simulation {{ sim_id }}{% endblock %}{% block main %}
<div id="play" data-sim="{{ sim_id }}" data-seat="{{ seat }}">
<h1>You play {{ seat }}</h1>
<p id="state" class="muted">Loading...</p>
<form id="move" class="card" hidden>
<label>Action <select id="action_type" name="action_type"></select></label>
<label>Say or do <textarea id="argument" name="argument" rows="3" cols="70"></textarea></label>
<select id="choices" name="choices" hidden></select>
<div id="recipients" class="small" title="Leave all unchecked to address everyone present"></div>
<button type="submit" id="send">Send</button>
</form>
<h2>What you see</h2>
<div class="card pre small" id="view"></div>
</div><script src="/static/play.js"></script>
{% endblock %}
"""

DOCS = """{% extends "base.html" %}{% block title %}API{% endblock %}{% block main %}
<h1>{{ title }} <span class="muted small">{{ version }}</span></h1>
<p class="muted small">The OpenAPI document: <a href="/api/openapi.json">/api/openapi.json</a>. This page lists it with
no script (Swagger UI would load from a CDN, which the server's CSP forbids and offline machines lack).</p>
<table><thead><tr><th>method</th><th>path</th><th>what</th></tr></thead><tbody>
{% for r in routes %}<tr><td><code>{{ r.method }}</code></td><td><code>{{ r.path }}</code></td>
<td>{{ r.summary }}</td></tr>
{% endfor %}<tr><td><code>WS</code></td><td><code>/api/simulations/{sim_id}/stream</code></td>
<td>Each turn as it happens, then the rating, then the end</td></tr></tbody></table>
{% endblock %}
"""


def server_templates() -> Environment:
    env = environment()
    assert env.loader is not None
    env.loader = ChoiceLoader([DictLoader({"live.html": LIVE, "play.html": PLAY, "docs.html": DOCS}), env.loader])
    return env


def _html(request: Request, name: str, **context: Any) -> HTMLResponse:
    templates: Environment = request.app.state.templates
    body = templates.get_template(name).render(store_url=request.app.state.store.url, **context)
    return HTMLResponse(body)


def _turn_rows(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for event in events:
        if event["type"] == "turn":
            turn = event["turn"]
            action = turn["action"]
            kind = KIND_CLASS.get(action["action_type"], action["action_type"])
            rows.append({"turn": turn["turn"], "agent": turn["agent"], "kind": kind, "to": action.get("to"), **action})
    return rows


@router.get("/simulations/{sim_id}", response_class=HTMLResponse)
async def live_page(request: Request, sim_id: str) -> HTMLResponse:
    found = await request.app.state.simulations.find(sim_id)
    if found is None:
        raise HTTPException(404, f"no simulation {sim_id!r}")
    if isinstance(found, EpisodeLog):
        events, status, scenario = events_of(found), f"done ({found.status})", found.setup.scenario.id
        agents, humans = {a.name: a.model for a in found.agents}, {}
    else:
        summary = found.summary()
        events, status, scenario = list(found.events), found.status, summary["scenario"]
        agents, humans = summary["agents"], summary["human_seats"]
    rating = next((e["rating"] for e in events if e["type"] == "rating"), None)
    return _html(
        request,
        "live.html",
        sim_id=sim_id,
        scenario=scenario,
        status=status,
        agents=agents,
        human_seats=humans,
        turns=_turn_rows(events),
        rating="" if rating is None else (rating.get("ratings") or rating.get("error") or ""),
    )


@router.get("/simulations/{sim_id}/play/{seat}", response_class=HTMLResponse)
async def play_page(request: Request, sim_id: str, seat: str) -> HTMLResponse:
    found = await request.app.state.simulations.find(sim_id)
    if not isinstance(found, Simulation) or seat not in found.seats:
        raise HTTPException(404, f"no human seat {seat!r} in simulation {sim_id!r}")
    return _html(request, "play.html", sim_id=sim_id, seat=seat)


@router.get("/docs", response_class=HTMLResponse)
def docs(request: Request) -> HTMLResponse:
    spec = request.app.openapi()
    routes = [
        {"method": method.upper(), "path": path, "summary": op.get("summary", "")}
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
    ]
    return _html(request, "docs.html", title=spec["info"]["title"], version=spec["info"]["version"], routes=routes)


@router.get("/static/{name}")
def script(name: str) -> Response:
    if name not in SCRIPTS:
        raise HTTPException(404, f"no script {name!r}")
    return Response(SCRIPTS[name], media_type="text/javascript", headers={"Cache-Control": "no-cache"})
