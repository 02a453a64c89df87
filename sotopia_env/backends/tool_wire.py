"""What a backend needs to carry a ``tools`` conversation (``sotopia_env.tool_calls``): OpenAI's wire format for
tool calls and tool answers, and the chat template that renders them locally. Here, below the world layer, so the
backends import nothing above them."""

from __future__ import annotations

import json
from typing import Any


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
