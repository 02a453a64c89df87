"""A stand-in for ``vllm serve`` in the policy-server tests: an OpenAI-compatible loopback server on ``--port``.

    python tests/policy_stand_in.py serve BASE --enable-lora --lora-modules policy=ADAPTER --port PORT \\
        --record FILE [--die-after N]

It takes vLLM's arguments, answers like ``benchmarks/_loopback_server.py`` (every agent turn is the same
``speak``), serves ``GET /v1/models`` as its health URL, and appends to ``--record`` one JSON line with the
arguments it was started with, then one per chat request (``{"model": ...}``). With ``--die-after N`` it exits
with code 3 when request N+1 arrives (a server that dies mid-stage). It stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from _loopback_server import respond  # noqa: E402
from loopback_openai import LoopbackOpenAI, Reply  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--die-after", type=int, default=None)
    args, _ = parser.parse_known_args()  # vLLM's own arguments are recorded, not interpreted
    lock = threading.Lock()
    answered = 0

    def record(entry: dict) -> None:
        with open(args.record, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def responder(body: dict) -> Reply:
        nonlocal answered
        with lock:
            if args.die_after is not None and answered >= args.die_after:
                print(f"stand-in: dying after {answered} requests", flush=True)
                os._exit(3)
            answered += 1
            record({"model": body.get("model")})
        return respond(body)

    record({"argv": sys.argv[1:]})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with LoopbackOpenAI(responder, port=args.port, model_ids=("policy",)):
        print(f"stand-in: serving on port {args.port}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
