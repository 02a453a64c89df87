"""The two scripts of the server's pages, served from this origin (``/static/*.js``; the CSP allows no other).

Kept as strings, as the viewer keeps its templates, so the package needs no data files. They write text with
``textContent`` only (never HTML), so nothing a model or a person says can inject markup.

- ``live.js`` (the live viewer): follows ``/api/simulations/{id}/stream`` and appends each turn it has not shown.
- ``play.js`` (a human seat): polls the seat's view, fills the form on the seat's turn, posts the move.
"""

from __future__ import annotations

LIVE_JS = r"""
"use strict";
(function () {
  const root = document.getElementById("live");
  const sim = root.dataset.sim;
  const list = document.getElementById("turns");
  const state = document.getElementById("state");
  const rating = document.getElementById("rating");
  let shown = list.querySelectorAll("li").length;
  function line(turn) {
    const a = turn.action;
    const li = document.createElement("li");
    li.className = a.action_type === "non-verbal communication" ? "nonverbal" : a.action_type;
    const n = document.createElement("span"); n.className = "turn"; n.textContent = "#" + turn.turn;
    const who = document.createElement("span"); who.className = "who";
    who.textContent = turn.agent + (a.to ? " (to " + a.to.join(", ") + ")" : "");
    const text = document.createElement("span"); text.className = "text"; text.textContent = a.argument || "";
    const kind = document.createElement("span"); kind.className = "kind"; kind.textContent = a.action_type;
    who.appendChild(kind);
    li.append(n, who, text);
    return li;
  }
  const scheme = location.protocol === "https:" ? "wss://" : "ws://";
  const ws = new WebSocket(scheme + location.host + "/api/simulations/" + sim + "/stream");
  let seen = 0;
  ws.onmessage = function (message) {
    const event = JSON.parse(message.data);
    if (event.type === "turn") {
      seen += 1;
      if (seen > shown) { list.appendChild(line(event.turn)); shown = seen; }
      state.textContent = "running: " + seen + " turns";
    } else if (event.type === "rating") {
      rating.textContent = event.rating ? JSON.stringify(event.rating.ratings || event.rating.error) : "not rated";
    } else if (event.type === "end") {
      state.textContent = event.status + (event.episode_status ? " (" + event.episode_status + ")" : "");
      if (event.episode_id) {
        const link = document.createElement("a");
        link.href = "/episodes/" + event.episode_id; link.textContent = " stored episode " + event.episode_id;
        state.appendChild(link);
      }
      root.dataset.ended = "1";
    }
  };
  ws.onclose = function () { if (!root.dataset.ended) { state.textContent += " (stream closed)"; } };
})();
"""

PLAY_JS = r"""
"use strict";
(function () {
  const root = document.getElementById("play");
  const api = "/api/simulations/" + root.dataset.sim + "/seats/" + encodeURIComponent(root.dataset.seat);
  const view = document.getElementById("view");
  const state = document.getElementById("state");
  const form = document.getElementById("move");
  const kind = document.getElementById("action_type");
  const text = document.getElementById("argument");
  const choices = document.getElementById("choices");
  const recipients = document.getElementById("recipients");
  let turn = null;
  function options(select, values) {
    select.replaceChildren(...values.map(function (v) {
      const o = document.createElement("option"); o.value = v; o.textContent = v; return o;
    }));
  }
  function show(data) {
    const obs = data.observation;
    if (obs) { view.textContent = obs.text; }
    if (data.simulation !== "running" && data.simulation !== "queued") {
      form.hidden = true;
      state.textContent = "The episode has ended (" + data.simulation + ").";
      if (data.episode_id) {
        const link = document.createElement("a");
        link.href = "/episodes/" + data.episode_id; link.textContent = " See it whole.";
        state.appendChild(link);
      }
      root.dataset.ended = "1";
      return false;
    }
    if (data.your_turn && obs && obs.turn !== turn) {
      turn = obs.turn;
      options(kind, obs.available_actions);
      options(choices, obs.choices);
      choices.hidden = obs.choices.length === 0;
      recipients.replaceChildren(...obs.recipients.map(function (name) {
        const label = document.createElement("label");
        const box = document.createElement("input"); box.type = "checkbox"; box.value = name;
        label.append(box, " " + name); return label;
      }));
      text.value = "";
      form.hidden = false;
      state.textContent = "Your turn (#" + obs.turn + "): you have " + data.timeout_s + " s.";
    } else if (!data.your_turn) {
      form.hidden = true;
      state.textContent = "Waiting for the others...";
    }
    return true;
  }
  function poll() {
    fetch(api, {credentials: "same-origin"}).then(function (r) { return r.json(); }).then(function (data) {
      if (show(data)) { setTimeout(poll, 400); }
    }).catch(function () { setTimeout(poll, 1000); });
  }
  form.addEventListener("submit", function (e) {
    e.preventDefault();
    const to = Array.from(recipients.querySelectorAll("input:checked")).map(function (b) { return b.value; });
    const move = {action_type: kind.value, argument: choices.hidden ? text.value : choices.value};
    if (to.length) { move.to = to; }
    form.hidden = true;
    fetch(api, {method: "POST", credentials: "same-origin", headers: {"Content-Type": "application/json"},
                body: JSON.stringify(move)})
      .then(function (r) { return r.json().then(function (body) { return [r.ok, body]; }); })
      .then(function (res) {
        if (!res[0]) { form.hidden = false; state.textContent = res[1].detail; return; }
        state.textContent = "Sent. Waiting for the others...";
      });
  });
  poll();
})();
"""
