"""What a backend needs to carry a ``tools`` conversation (``sotopia_env.tool_calls``): OpenAI's wire format for
tool calls and tool answers, and the chat template that renders them locally. Here, below the world layer, so the
backends import nothing above them."""

from __future__ import annotations

import json
from typing import Any, NamedTuple


def openai_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` in OpenAI's wire format: each tool call with an id and its arguments as a JSON string, each tool
    answer with the id of the call it answers (servers such as vLLM parse them back for the chat template)."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for n, message in enumerate(messages):
        message = dict(message)
        if message.get("tool_calls"):
            calls = []
            for k, call in enumerate(message["tool_calls"]):
                function = dict(call.get("function", {}))
                if not isinstance(function.get("arguments"), str):
                    function["arguments"] = json.dumps(function.get("arguments") or {})
                calls.append({"id": call.get("id") or f"call_{n}_{k}", "type": "function", "function": function})
            message["tool_calls"] = calls
            pending = [c["id"] for c in calls]
        elif message.get("role") == "tool" and "tool_call_id" not in message:
            message["tool_call_id"] = pending.pop(0) if pending else f"call_{n}"
        out.append(message)
    return out


def tool_template(tokenizer: Any) -> str | None:
    """The chat template to render a ``tools`` conversation with: None when ``tokenizer``'s own renders tool calls
    and tool answers (a TRL-trained model directory saves the one it was trained with), else TRL's ChatML template
    with tools (``trl/chat_templates/qwen2_5.jinja``, what ``training.trl_env.tool_chat_template`` trains ChatML
    models such as SmolLM2 with). ValueError (one line) for a tokenizer that is neither, or without TRL."""
    call = {"type": "function", "function": {"name": "speak_x1", "arguments": {"words_x2": "hello_x3"}}}
    probe = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "speak_x1", "content": "answer_x4"},
    ]
    try:
        rendered = str(tokenizer.apply_chat_template(probe, tokenize=False)) if tokenizer.chat_template else ""
    except Exception:  # a template that rejects the roles (jinja's TemplateError, a TypeError)
        rendered = ""
    if all(s in rendered for s in ("speak_x1", "words_x2", "hello_x3", "answer_x4")):
        return None
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" not in vocab or "<|im_end|>" not in vocab:
        raise ValueError("the tokenizer's chat template has no tool calls and it is not ChatML: give it a template")
    try:
        from importlib import resources

        return (resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()
    except (ImportError, FileNotFoundError):
        raise ValueError(
            "the tokenizer's chat template has no tool calls: install trl (its ChatML tool template) or save the "
            "model with the template it was trained with"
        ) from None


_PROBE_CALL = {"name": "speak_x1", "arguments": {"words_x2": "hello_x3", "to_x4": ["x5", "x6"]}}


class CallFormat(NamedTuple):
    """How a chat template writes one tool call as the assistant's whole turn: ``prefix``, the call's JSON object
    ``{"name": ..., "arguments": ...}`` written with ``separators`` (item, key), then ``suffix``."""

    prefix: str
    suffix: str
    separators: tuple[str, str]


def call_format(tokenizer: Any, template: str | None = None, stops: list[str] | None = None) -> CallFormat:
    """What the chat template (``template``, else the tokenizer's own) writes around one tool call's JSON in an
    assistant turn: the text from the generation prompt to the call's ``{"name": ..., "arguments": ...}``, and from
    its end to the first of ``stops`` (the texts of the tokens that end a turn; default the tokenizer's eos and
    special tokens). Hermes/ChatML (TRL's ``qwen2_5.jinja``): ``"<tool_call>\\n"``, ``"\\n</tool_call>"``, and
    ``json.dumps``'s separators. The local backend constrains a ``tools`` reply to that (then a stop token).
    ValueError (one line) for a template that does not write the call as that JSON object after the generation
    prompt."""
    user = [{"role": "user", "content": "hi"}]
    call = {"type": "function", "function": dict(_PROBE_CALL)}
    turn = [*user, {"role": "assistant", "content": "", "tool_calls": [call]}]
    head = str(tokenizer.apply_chat_template(user, chat_template=template, add_generation_prompt=True, tokenize=False))
    full = str(tokenizer.apply_chat_template(turn, chat_template=template, tokenize=False))
    if not full.startswith(head):
        raise ValueError("the chat template's assistant turn does not start with its generation prompt")
    reply = full[len(head) :]
    decoder = json.JSONDecoder()
    for start in (k for k, c in enumerate(reply) if c == "{"):
        try:
            found, end = decoder.raw_decode(reply, start)
        except ValueError:
            continue
        if found == _PROBE_CALL:
            break
    else:
        raise ValueError('the chat template does not write a tool call as {"name": ..., "arguments": ...}')
    suffix = reply[end:]
    if stops is None:
        stops = [tokenizer.eos_token, *getattr(tokenizer, "additional_special_tokens", [])]
    stops = [t for t in stops if t]
    cut = min((suffix.find(t) for t in stops if t in suffix), default=len(suffix))
    written = reply[start:end]
    layouts = ((", ", ": "), (",", ":"), (",", ": "), (", ", ":"))
    separators = next((pair for pair in layouts if json.dumps(found, separators=pair) == written), None)
    if separators is None:
        raise ValueError(f"the chat template writes a tool call's JSON in a layout not known here: {written!r}")
    return CallFormat(reply[:start], suffix[:cut], separators)
