"""The HTML templates (Jinja2, autoescaped) and the inline stylesheet.

They live here as strings so the viewer needs no package-data files; every
value is escaped on output, and the pages use no script at all.
"""

from __future__ import annotations

import math
from typing import Any
from urllib.parse import urlencode

from jinja2 import DictLoader, Environment, StrictUndefined, select_autoescape

CSS = """
:root { --fg: #1d2330; --muted: #5d6575; --line: #d9dde5; --bg: #f6f7f9; --card: #fff;
  --s1: #2b6cb0; --s2: #b7472a; --ok: #2f7d32; --warn: #a86500; --bad: #b3261e; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif;
  color: var(--fg); background: var(--bg); }
header { background: #1d2330; color: #fff; padding: .6rem 1.2rem; display: flex; gap: 1.5rem;
  align-items: baseline; }
header a { color: #fff; text-decoration: none; } header .brand { font-weight: 700; }
main { padding: 1rem 1.2rem 3rem; max-width: 1400px; margin: 0 auto; }
a { color: var(--s1); }
h1 { font-size: 1.4rem; margin: .2rem 0 .8rem; } h2 { font-size: 1.1rem; margin: 1.4rem 0 .6rem; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: .8rem 1rem; }
.muted { color: var(--muted); } .small { font-size: .85rem; }
.pre { white-space: pre-wrap; overflow-wrap: anywhere; }
form.filters { display: flex; flex-wrap: wrap; gap: .6rem 1rem; align-items: end; margin-bottom: 1rem; }
form.filters label { display: flex; flex-direction: column; font-size: .8rem; color: var(--muted); }
form.filters input, form.filters select { font: inherit; padding: .2rem .3rem; min-width: 8rem; }
button { font: inherit; padding: .3rem .9rem; }
table { border-collapse: collapse; width: 100%; background: var(--card); }
th, td { border-bottom: 1px solid var(--line); padding: .35rem .5rem; text-align: left; vertical-align: top; }
th { background: #eef0f4; font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.badge { display: inline-block; padding: 0 .45rem; border-radius: 9px; font-size: .8rem; color: #fff; }
.badge.rated { background: var(--ok); } .badge.unrated { background: var(--warn); }
.badge.failed { background: var(--bad); }
.pager { display: flex; gap: 1rem; align-items: center; margin: .8rem 0; }
.seats { display: grid; grid-template-columns: repeat(auto-fit, minmax(320px, 1fr)); gap: 1rem; }
.seat1 { border-top: 4px solid var(--s1); } .seat2 { border-top: 4px solid var(--s2); }
.who.seat1, .who.seat2 { border-top: 0; } .who.seat1 { color: var(--s1); } .who.seat2 { color: var(--s2); }
.who { font-weight: 600; }
dl { margin: 0; } dt { font-weight: 600; margin-top: .5rem; } dd { margin: 0; }
ol.transcript { list-style: none; padding: 0; margin: 0; }
ol.transcript li { display: grid; grid-template-columns: 3.5rem 11rem 1fr; gap: .5rem; padding: .45rem .6rem;
  border-bottom: 1px solid var(--line); background: var(--card); }
.turn { color: var(--muted); font-variant-numeric: tabular-nums; }
.kind { font-size: .75rem; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); display: block; }
li.speak .text::before { content: "\\201C"; } li.speak .text::after { content: "\\201D"; }
li.nonverbal .text { font-style: italic; color: #4a4f8a; }
li.action .text { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: .9rem; color: #1f5f4a; }
li.leave { background: #fff4f2; } li.leave .text { color: var(--bad); }
li.none .text { color: var(--muted); }
.error { border-left: 4px solid var(--bad); background: #fff4f2; padding: .6rem .8rem; }
.warning { border-left: 4px solid var(--warn); background: #fff8ec; padding: .6rem .8rem; }
.reason { font-size: .85rem; color: var(--muted); }
.nowrap { white-space: nowrap; } .scroll { overflow-x: auto; }
th.dim { white-space: normal; overflow-wrap: anywhere; max-width: 9rem; }
img.chart { max-width: 100%; background: #fff; border: 1px solid var(--line); margin-top: 1rem; }
"""

BASE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{% block title %}{% endblock %} · sotopia-env</title>
<style>{{ css | safe }}</style></head>
<body><header><a class="brand" href="/">sotopia-env</a><a href="/">Episodes</a><a href="/report">Report</a>
<a href="/leaderboard">Leaderboard</a>
<span class="muted small">{{ store_url }}</span></header>
<main>{% block main %}{% endblock %}</main></body></html>
"""

LIST = """{% extends "base.html" %}{% block title %}Episodes{% endblock %}{% block main %}
<h1>Episodes</h1>
<form class="filters" method="get" action="/">
<label>tag<select name="tag"><option value="">any</option>
{% for t in facets.tags %}<option{% if t == q.tag %} selected{% endif %}>{{ t }}</option>{% endfor %}
</select></label>
<label>model<input name="model" list="models" value="{{ q.model or '' }}"></label>
<datalist id="models">{% for m in facets.models %}<option value="{{ m }}">{% endfor %}</datalist>
<label>scenario<input name="scenario" list="scenarios" value="{{ q.scenario or '' }}"></label>
<datalist id="scenarios">{% for s in facets.scenarios %}<option value="{{ s }}">{% endfor %}</datalist>
<label>split<select name="split"><option value="">any</option>
{% for s in splits %}<option{% if s == q.split %} selected{% endif %}>{{ s }}</option>{% endfor %}
</select></label>
<label>status<select name="status"><option value="">any</option>
{% for s in statuses %}<option{% if s == q.status %} selected{% endif %}>{{ s }}</option>{% endfor %}
</select></label>
<label>sort by<select name="sort">
{% for s in sorts %}<option{% if s == q.sort %} selected{% endif %}>{{ s }}</option>{% endfor %}
</select></label>
<label>score of<select name="seat">
{% for value, text in seats %}
<option value="{{ value }}"{% if value == q.seat %} selected{% endif %}>{{ text }}</option>
{% endfor %}</select></label>
<label>order<select name="order">
<option value="desc"{% if q.order == "desc" %} selected{% endif %}>newest / best first</option>
<option value="asc"{% if q.order == "asc" %} selected{% endif %}>oldest / worst first</option>
</select></label>
<label>per page<input name="limit" type="number" min="1" max="{{ max_limit }}" value="{{ q.limit }}"></label>
<button type="submit">Apply</button> <a href="/">reset</a>
</form>
{% macro pager() %}<div class="pager">
{% if page.prev_offset is not none %}
<a rel="prev" href="{{ url('/', q.params(offset=page.prev_offset)) }}">&larr; previous</a>
{% endif %}<span class="muted">{% if page.total %}{{ q.offset + 1 }}–{{ q.offset + page.items | length }} of {% endif %}
{{ page.total }} episode{{ '' if page.total == 1 else 's' }}</span>
{% if page.next_offset is not none %}
<a rel="next" href="{{ url('/', q.params(offset=page.next_offset)) }}">next &rarr;</a>
{% endif %}<a class="small" href="{{ url('/api/episodes', q.params()) }}">JSON</a></div>{% endmacro %}
{{ pager() }}
<div class="scroll"><table class="episodes"><thead><tr><th>created</th><th>episode</th><th>tag</th>
<th>scenario</th><th>split</th>
<th>models (seat 1 vs 2)</th><th>status</th><th>end</th><th class="num">turns</th>
{% for d in score_columns %}<th class="num">{{ d }} 1 / 2</th>{% endfor %}
{% if q.sort != "created" %}<th class="num">sort key</th>{% endif %}</tr></thead><tbody>
{% for s in page.items %}<tr>
<td class="small nowrap">{{ s.created_at | when }}</td>
<td class="nowrap"><a class="episode-link" href="{{ url('/episodes/' ~ (s.id | urlencode)) }}">{{ s.id }}</a></td>
<td>{{ s.tag }}</td><td>{{ s.codename }}<div class="muted small">{{ s.scenario }}</div></td><td>{{ s.split }}</td>
<td>{{ s.models | join(" vs ") }}</td><td><span class="badge {{ s.status }}">{{ s.status }}</span></td>
<td class="small">{{ s.termination_reason or "–" }}</td><td class="num">{{ s.turns }}</td>
{% for d in score_columns %}<td class="num">{{ s.score(d, "1") | num }} / {{ s.score(d, "2") | num }}</td>{% endfor %}
{% if q.sort != "created" %}<td class="num">{{ s.score(q.sort, q.seat) | num }}</td>{% endif %}
</tr>{% else %}<tr><td colspan="12" class="muted">No episodes match.</td></tr>{% endfor %}
</tbody></table></div>
{{ pager() }}
{% endblock %}
"""

EPISODE = """{% extends "base.html" %}{% block title %}Episode {{ log.id }}{% endblock %}{% block main %}
<h1>{{ log.setup.scenario.codename }} <span class="badge {{ log.status }}">{{ log.status }}</span></h1>
<p class="muted small">episode <code>{{ log.id }}</code> · tag {{ log.tag or "–" }} · {{ log.created_at }}
· {{ "%.1f" | format(log.wall_seconds) }} s · <a href="{{ url('/api/episodes/' ~ (log.id | urlencode)) }}">JSON</a></p>
<h2>Scenario</h2>
<div class="card"><p class="pre scenario">{{ log.setup.scenario.scenario }}</p>
<p class="muted small">{{ log.setup.scenario.id }} · split {{ log.setup.scenario.split }}
· relationship {{ relationship }}{% if log.setup.scenario.tags %} · tags {{ log.setup.scenario.tags | join(", ") }}
{% endif %}{% if log.setup.relationship and log.setup.relationship.background_story %}
<br>shared history: {{ log.setup.relationship.background_story }}{% endif %}</p></div>
<h2>Characters</h2>
<div class="seats">{% for seat in seats %}<div class="card seat{{ seat.number }}">
<h3 class="who seat{{ seat.number }}">Seat {{ seat.number }}: {{ seat.name }}</h3>
<p class="muted small">model {{ seat.model or "–" }} · {{ seat.agent_class or "–" }}</p>
<dl><dt>Goal</dt><dd class="pre goal">{{ seat.goal }}</dd>
<dt>Profile (everything, secret included)</dt><dd class="pre small">{{ seat.profile }}</dd>
<dt>What {{ seat.name }} was shown (incl. what they could see of the other)</dt>
<dd class="pre small background">{{ seat.background }}</dd></dl></div>{% endfor %}</div>
<h2>Transcript</h2>
{% if lines %}<ol class="transcript">{% for line in lines %}<li class="{{ line.kind }}">
<span class="turn">#{{ line.turn }}</span>
<span class="who seat{{ line.seat }}">{{ line.agent }}<span class="kind">{{ kinds[line.kind] }}</span></span>
<span class="text pre">{{ line.text }}</span></li>{% endfor %}</ol>
{% else %}<p class="muted">No turns were played.</p>{% endif %}
<p>Ended: <strong class="termination">{{ log.termination_reason or "–" }}</strong></p>
{% if log.status == "failed" %}<h2>Error</h2>
<div class="error pre episode-error">The episode failed: {{ log.error }}</div>{% endif %}
<h2>Scores</h2>
{% if rows %}<table class="scores"><thead><tr><th>dimension</th><th>range</th>
{% for seat in seats %}<th class="who seat{{ seat.number }}">{{ seat.name }}</th>{% endfor %}</tr></thead><tbody>
{% for row in rows %}<tr><th>{{ row.dimension }}</th><td class="muted small">{{ row.range }}</td>
{% for cell in row.cells %}<td><strong class="score">{{ cell.score if cell.score is not none else "–" }}</strong>
<div class="reason pre">{{ cell.reasoning }}</div></td>{% endfor %}</tr>{% endfor %}
<tr><th>overall</th><td class="muted small">mean</td>{% for v in overall %}<td><strong>{{ v | num }}</strong></td>
{% endfor %}</tr></tbody></table>
<p class="muted small">rated by {{ log.rating.evaluator }} in {{ log.rating.attempts }} attempt(s)</p>
{% elif log.rating is not none %}<div class="warning pre rating-error">Unrated: {{ log.rating.error }}
(evaluator {{ log.rating.evaluator }}, {{ log.rating.attempts }} attempt(s))</div>
{% else %}<p class="muted">Not rated.</p>{% endif %}
{% if log.usage or log.agent_errors %}<h2>Usage</h2><table class="usage"><thead><tr><th>who</th>
<th class="num">LLM calls</th><th class="num">prompt tokens</th><th class="num">completion tokens</th>
<th class="num">LLM seconds</th><th class="num">LLM errors</th><th class="num">failed actions</th>
</tr></thead><tbody>
{% for name, u in log.usage.items() %}<tr><td>{{ name }}</td><td class="num">{{ u.calls }}</td>
<td class="num">{{ u.prompt_tokens }}</td><td class="num">{{ u.completion_tokens }}</td>
<td class="num">{{ "%.2f" | format(u.llm_seconds) }}</td><td class="num">{{ u.errors }}</td>
<td class="num">{{ log.agent_errors.get(name, 0) }}</td>
</tr>{% endfor %}</tbody></table>{% endif %}
{% endblock %}
"""

MACROS = """{% macro cell(c) %}<td class="num">{% if c %}{{ c.mean | fixed }}
{% if c.low == c.low %}<div class="muted small">[{{ c.low | fixed }}, {{ c.high | fixed }}]</div>{% endif %}
<div class="muted small">n={{ c.n }}</div>{% else %}–{% endif %}</td>{% endmacro %}
"""

REPORT = """{% extends "base.html" %}{% from "macros.html" import cell %}
{% block title %}Report{% endblock %}{% block main %}
<h1>Report{% if tag is not none %}: {{ tag }}{% else %}: all tags{% endif %}</h1>
<form class="filters" method="get" action="/report">
<label>tag<select name="tag"><option value="">all tags</option>
{% for t in tags %}<option{% if t == tag %} selected{% endif %}>{{ t }}</option>{% endfor %}</select></label>
<label>rows<select name="by_seat"><option value="false">per model</option>
<option value="true"{% if by_seat %} selected{% endif %}>per model and seat</option></select></label>
<button type="submit">Show</button></form>
<p class="muted small">Mean per model and dimension with its 95% t-interval and n. Every seat of a rated episode
counts once; unrated and failed episodes are counted, never averaged as 0.
<a href="{{ url('/api/report', params) }}">JSON</a></p>
{% if report.rows %}<div class="scroll"><table class="report"><thead><tr><th>model</th>
{% for d in report.dimensions %}<th class="num dim">{{ d }}</th>{% endfor %}
<th class="num">episodes</th><th class="num">rated</th><th class="num">unrated</th><th class="num">failed</th>
</tr></thead><tbody>{% for row in report.rows %}<tr><th>{{ row.model }}</th>
{% for d in report.dimensions %}{{ cell(row.cells.get(d)) }}{% endfor %}
<td class="num">{{ row.episodes }}</td><td class="num">{{ row.rated }}</td><td class="num">{{ row.unrated }}</td>
<td class="num">{{ row.failed }}</td></tr>{% endfor %}</tbody></table></div>
{% if report.dimensions %}<img class="chart" alt="bar chart of the report" src="{{ url('/report.png', params) }}">
{% endif %}{% else %}<p class="muted">No episodes{% if tag is not none %} with this tag{% endif %}.</p>{% endif %}
{% endblock %}
"""

LEADERBOARD = """{% extends "base.html" %}{% from "macros.html" import cell %}
{% block title %}Leaderboard{% endblock %}{% block main %}
<h1>Leaderboard{% if tag is not none %}: {{ tag }}{% endif %}</h1>
<form class="filters" method="get" action="/leaderboard">
<label>tag<select name="tag"><option value="">all tags</option>
{% for t in tags %}<option{% if t == tag %} selected{% endif %}>{{ t }}</option>{% endfor %}</select></label>
<button type="submit">Show</button></form>
<p class="muted small">One board per protocol card: models are ranked only against results measured the same way.
SOTOPIA-EVAL: mean with its 95% t-interval and n. Won/lost outcomes: OpenSkill (Plackett-Luce), ranked by
mu &minus; 3&sigma;. <a href="{{ url('/api/leaderboard', params) }}">JSON</a></p>
{% for board in boards %}<section class="board">
<h2>Card <code>{{ board.card.id }}</code> · {{ board.episodes }} episodes · {{ board.tags | join(", ") }}</h2>
<div class="card"><dl class="small">{% for label, text in board.card.summary() %}<dt>{{ label }}</dt>
<dd>{{ text }}</dd>{% endfor %}</dl></div>
{% if board.skills %}<div class="scroll"><table class="skills"><thead><tr><th>#</th><th>model</th>
<th class="num">ordinal</th><th class="num">mu</th><th class="num">sigma</th><th class="num">matches</th>
<th class="num">won</th></tr></thead><tbody>{% for s in board.skills %}<tr><td>{{ loop.index }}</td>
<th>{{ s.model }}</th><td class="num">{{ s.ordinal | fixed }}</td><td class="num">{{ s.mu | fixed }}</td>
<td class="num">{{ s.sigma | fixed }}</td><td class="num">{{ s.matches }}</td><td class="num">{{ s.wins }}</td>
</tr>{% endfor %}</tbody></table></div>{% endif %}
{% if board.rows %}<div class="scroll"><table class="eval"><thead><tr><th>#</th><th>model</th>
<th class="num">goal</th><th class="num">overall</th><th class="num">rated</th><th class="num">unrated</th>
<th class="num">failed</th></tr></thead><tbody>{% for r in board.rows %}<tr><td>{{ loop.index }}</td>
<th>{{ r.model }}</th>{{ cell(r.goal) }}{{ cell(r.overall) }}
<td class="num">{{ r.rated }}</td><td class="num">{{ r.unrated }}</td><td class="num">{{ r.failed }}</td>
</tr>{% endfor %}</tbody></table></div>{% endif %}
</section>{% else %}<p class="muted">No episodes{% if tag is not none %} with this tag{% endif %}.</p>{% endfor %}
{% endblock %}
"""

ERROR = """{% extends "base.html" %}{% block title %}{{ status }}{% endblock %}{% block main %}
<h1>{{ status }} {{ title }}</h1><div class="error pre">{{ message }}</div><p><a href="/">Back to the episodes</a></p>
{% endblock %}
"""


def num(value: float | None, digits: int = 2) -> str:
    """A score for display: integers as such, others rounded; '–' for none or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.{digits}f}"


def fixed(value: float | None, digits: int = 2) -> str:
    """A mean for display, always with ``digits`` decimals (never ``-0.00``); '–' for none or NaN."""
    if value is None or math.isnan(value):
        return "–"
    return f"{round(value, digits) + 0.0:.{digits}f}"


def when(iso: str) -> str:
    """``2025-03-01T09:00:03+00:00`` -> ``2025-03-01 09:00:03``."""
    return iso[:19].replace("T", " ")


def url(path: str, params: dict[str, Any] | None = None) -> str:
    return f"{path}?{urlencode(params)}" if params else path


def environment() -> Environment:
    env = Environment(
        loader=DictLoader(
            {
                "base.html": BASE,
                "list.html": LIST,
                "episode.html": EPISODE,
                "macros.html": MACROS,
                "report.html": REPORT,
                "leaderboard.html": LEADERBOARD,
                "error.html": ERROR,
            }
        ),
        autoescape=select_autoescape(default=True, default_for_string=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(num=num, fixed=fixed, when=when)
    env.globals.update(css=CSS, url=url)
    return env
