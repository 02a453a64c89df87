"""What the action schema's grammar costs per decoding step: xgrammar filling one row's token mask.

    python benchmarks/grammar_mask.py                      # smollm2-135m's tokenizer, the real action schema
    python benchmarks/grammar_mask.py --model PATH --repeats 5

Walks the tokens of typical actions (a 70-character spoken argument, a gesture, a long speech, a leave)
through a fresh ``GrammarMatcher`` and times ``fill_next_token_bitmask`` before every token, as the local
backend does once per row per step. Rows: the schema as shipped, and for comparison the earlier schema whose
worded-argument pattern ended in a bounded repetition ``{0,599}``, and the same schema with no pattern; then a
multi-party turn, a game's vote, and a ``tools`` reply (a TRL-trained policy's: one tool call of the seat's tools,
``<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`` as the model's tool template writes it, the same
moves as the first rows).
The model's own decoding step on this CPU is about 60-90 ms (benchmarks/README §3).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import _common
from _common import machine_line, print_table

from sotopia_env.actions import MAX_ARGUMENT_CHARS, WORDED_ARGUMENT, AgentAction, action_json_schema
from sotopia_env.backends.base import ChatRequest
from sotopia_env.backends.local import LocalBackend
from sotopia_env.tool_calls import tool_call_schema, tool_call_text, tool_schemas

_ = _common
ACTIONS = [
    {"action_type": "speak", "argument": "Hi! Would Tuesday morning work for the trial lesson? I can bring the gear."},
    {"action_type": "non-verbal communication", "argument": "nods and smiles"},
    {"action_type": "speak", "argument": ("I understand that you need it this weekend, " * 8).strip()},
    {"action_type": "leave", "argument": ""},
]
_JSON_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
_FIRST = r"[^\s.,;:!?…\-\"'()\[\]{}<>*_~\\]"


def with_argument_pattern(pattern: str | None) -> dict[str, Any]:
    """The shipped schema with its worded branch's argument replaced (None: a plain capped string)."""
    schema = action_json_schema()
    for branch in schema["anyOf"]:
        argument = branch["properties"]["argument"]
        if argument.get("pattern") == WORDED_ARGUMENT:
            branch["properties"]["argument"] = (
                {"type": "string", "pattern": pattern}
                if pattern
                else {"type": "string", "maxLength": MAX_ARGUMENT_CHARS}
            )
    return schema


PEOPLE = ["Ana Ruiz", "Bo Li", "Cy Diaz"]
ADDRESSED = [  # a multi-party turn: addressed to some, or to everyone
    {"action_type": "speak", "argument": "Between us: I think the rota should start with Cy.", "to": ["Bo Li"]},
    {"action_type": "speak", "argument": "Shall we start the rota on Monday?"},
    {"action_type": "speak", "argument": "Ana and Bo, can you both do Thursdays?", "to": ["Ana Ruiz", "Bo Li"]},
]
VOTES = [{"action_type": "action", "argument": f"vote for {name}"} for name in PEOPLE]
MULTI_PARTY = action_json_schema(recipients=PEOPLE)
VOTE = action_json_schema(["action"], choices=[f"vote for {name}" for name in PEOPLE])

SCHEMAS = {
    "shipped (worded pattern, unbounded, cap by the backend)": action_json_schema(),
    "before: pattern ending in {0,599}": with_argument_pattern(f"^{_FIRST}{_JSON_CHAR}{{0,{MAX_ARGUMENT_CHARS - 1}}}$"),
    "no pattern (maxLength only)": with_argument_pattern(None),
}


def mask_costs(
    backend: LocalBackend,
    schema: dict[str, Any],
    repeats: int = 1,
    actions: list[dict[str, Any]] = ACTIONS,
    tools: bool = False,
) -> list[float]:
    """Seconds per ``fill_next_token_bitmask`` call, over every step of every action, ``repeats`` times; the
    grammar is compiled as the backend compiles it (``tests/test_action_schema.py`` holds the shipped schema
    under 1 ms)."""
    import xgrammar as xgr

    if tools:  # ``schema`` is a tool call's; the reply is the call as the template writes it
        grammar = backend._constraint(ChatRequest(messages=[], tools=tool_schemas(), call_schema=schema))
    else:
        grammar = backend._constraint(ChatRequest(messages=[], json_schema=schema))
    bitmask = xgr.allocate_token_bitmask(1, backend._vocab_size)
    costs = []
    for _ in range(repeats):
        for action in actions:
            text = tool_call_text(AgentAction(**action)) if tools else json.dumps(action, ensure_ascii=False)
            ids = backend.tokenizer(text, add_special_tokens=False)["input_ids"]
            matcher = xgr.GrammarMatcher(grammar)
            for token in ids:
                start = time.perf_counter()
                matcher.fill_next_token_bitmask(bitmask, 0)
                costs.append(time.perf_counter() - start)
                if not matcher.accept_token(token):
                    raise ValueError(f"the grammar refused {action}: check the schema")
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="a local model spec; its tokenizer is used")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    backend = LocalBackend.from_spec(args.model)
    rows = []
    runs = [(label, schema, ACTIONS, False) for label, schema in SCHEMAS.items()] + [
        ("multi-party: optional 'to' (3 recipients)", MULTI_PARTY, ADDRESSED, False),
        ("game vote: argument one of 3 choices", VOTE, VOTES, False),
        ("tools: one tool call of the seat's tools", tool_call_schema(), ACTIONS, True),
    ]
    for label, schema, actions, tools in runs:
        start = time.perf_counter()
        backend._grammars.clear()
        costs = mask_costs(backend, schema, args.repeats, actions, tools)
        ms = [c * 1000 for c in costs]
        rows.append(
            [
                label,
                len(ms),
                f"{statistics.mean(ms):.3f}",
                f"{statistics.median(ms):.3f}",
                f"{max(ms):.3f}",
                f"{time.perf_counter() - start:.1f}",
            ]
        )
    print_table(
        f"xgrammar mask fill per step, one row ({args.model}'s tokenizer; two-seat rows walk {len(ACTIONS)} actions)",
        ["schema", "steps", "mean ms", "median ms", "max ms", "wall s (compile + walk)"],
        rows,
        note=machine_line(),
    )


if __name__ == "__main__":
    main()
