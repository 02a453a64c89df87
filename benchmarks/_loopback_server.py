"""The benchmarks' OpenAI-compatible server: ``tests/loopback_openai.py`` in its own process.

    python benchmarks/_loopback_server.py --latency 0.2

Prints its base URL on the first line of stdout, then reads commands from stdin, one per line, answering each
with one line: ``reset`` (forget recorded requests), ``stats`` (JSON counters), ``dump PATH`` (write the recorded
requests as JSON lines; answers their count). ``stats`` holds ``requests``, ``max_in_flight``, ``connections``
(TCP connections accepted) and ``cpu_s``
(this process's CPU time so far). It exits when stdin closes.

Every reply comes after ``--latency`` seconds. What it answers:

- a request whose json_schema has ``agent_1`` (our ``LLMEvaluator``): a valid rating for every dimension;
- sotopia's evaluator prompt ("evaluate how well participants achieve their goals"): a valid
  ``EvaluationForAgents[SotopiaDimensions]`` JSON;
- anything else (an agent's turn, ours or sotopia's): ``{"action_type": "speak", "argument": ...}``, so that
  agents never leave and every episode runs its full turn limit.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import loopback_openai  # noqa: E402
from loopback_openai import LoopbackOpenAI, Reply  # noqa: E402

# http.server writes the headers and the body of a reply in two send() calls; with Nagle's algorithm on, the
# second waits for the client's delayed ACK of the first: ~40 ms added to every call. Real servers (uvicorn,
# vLLM) set TCP_NODELAY, so this one does too.
loopback_openai._Handler.disable_nagle_algorithm = True

SPEAK = json.dumps({"action_type": "speak", "argument": "I hear you, but let us find a way that works for both of us."})
REASONING = "The agent stayed in character and pursued the goal politely."
SOTOPIA_DIMENSIONS = {
    "believability": (0, 10),
    "relationship": (-5, 5),
    "knowledge": (0, 10),
    "secret": (-10, 0),
    "social_rules": (-10, 0),
    "financial_and_material_benefits": (-5, 5),
    "goal": (0, 10),
}


def _mid(low: int, high: int) -> int:
    return (low + high) // 2


def our_rating(schema: dict[str, Any]) -> str:
    out = {}
    for agent, agent_schema in schema["properties"].items():
        dims = {}
        for dim, dim_schema in agent_schema["properties"].items():
            score = dim_schema["properties"]["score"]
            dims[dim] = {"reasoning": REASONING, "score": _mid(score.get("minimum", 0), score.get("maximum", 0))}
        out[agent] = dims
    return json.dumps(out)


def sotopia_rating() -> str:
    agent = {dim: [REASONING, _mid(lo, hi)] for dim, (lo, hi) in SOTOPIA_DIMENSIONS.items()}
    return json.dumps({"evaluations": {"agent_1": agent, "agent_2": agent}})


def prompt_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content") or "") for m in body.get("messages", []) if isinstance(m, dict))


def respond(body: dict[str, Any]) -> Reply:
    response_format = body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema") or {}
    if "agent_1" in (schema.get("properties") or {}):
        return Reply(our_rating(schema))
    if "evaluate how well participants achieve their goals" in prompt_text(body):
        return Reply(sotopia_rating())
    return Reply(SPEAK)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    with LoopbackOpenAI(respond, latency_s=args.latency, request_queue_size=4096) as srv:
        print(srv.base_url, flush=True)
        for line in sys.stdin:
            command, _, arg = line.strip().partition(" ")
            if command == "reset":
                srv.reset()
                print("ok", flush=True)
            elif command == "stats":
                usage = resource.getrusage(resource.RUSAGE_SELF)
                stats = {
                    "requests": len(srv.requests),
                    "max_in_flight": srv.max_in_flight,
                    "connections": srv.connections,
                    "cpu_s": usage.ru_utime + usage.ru_stime,
                }
                print(json.dumps(stats), flush=True)
            elif command == "dump":
                requests = srv.requests
                with open(arg, "w") as f:
                    for body in requests:
                        rf = body.get("response_format") or {}
                        record = {"messages": body.get("messages", []), "schema": bool(rf), "model": body.get("model")}
                        f.write(json.dumps(record) + "\n")
                print(len(requests), flush=True)
            else:
                print(f"unknown command {command!r}", flush=True)


if __name__ == "__main__":
    main()
