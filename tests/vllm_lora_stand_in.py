"""A stand-in for ``vllm serve BASE --enable-lora ...`` in the rollout-server tests (vLLM needs a GPU): a real
OpenAI-compatible server on loopback that generates with transformers and serves LoRA adapters loaded while it
runs, as vLLM does.

    python tests/vllm_lora_stand_in.py serve BASE --enable-lora --max-lora-rank 64 --lora-modules policy=ADAPTER \\
        --logprobs-mode processed_logprobs --port PORT --record FILE

Routes: ``GET /health``, ``GET /v1/models``; ``POST /v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``
(refused with 400 unless ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` is ``True``, as vLLM refuses them); ``POST
/v1/completions`` on a prompt of token ids with ``temperature``, ``seed``, ``max_tokens``, ``logprobs``,
``return_token_ids`` and ``structured_outputs`` (``json``, ``disable_any_whitespace``: xgrammar's mask). Its
log-probabilities are vLLM's ``processed_logprobs``: temperature and mask applied. One JSON line per event goes
to ``--record``: the argv, each adapter loaded or unloaded, each completion's model. One request generates at a
time.

``--close-strings`` is for a tiny random model, which never closes a JSON string by itself (a real one does):
from the budget's second half on, the logits of the tokens holding a ``"`` get +8 (a logit bias, as vLLM's
``logit_bias``; the log-probabilities it returns include it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading

import torch
import uvicorn
import xgrammar as xgr
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from peft import PeftModel
from transformers import AutoModelForCausalLM, AutoTokenizer


class Policy:
    """The base model with its LoRA adapters, by served name."""

    def __init__(self, base: str, adapters: dict[str, str], close_strings: bool = False) -> None:
        self.tokenizer = AutoTokenizer.from_pretrained(base)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32).eval()
        first, *others = adapters.items()
        self.model = PeftModel.from_pretrained(model, first[1], adapter_name=first[0]).eval()
        for name, path in others:
            self.load(name, path)
        vocab = self.model.config.vocab_size
        self.compiler = xgr.GrammarCompiler(xgr.TokenizerInfo.from_huggingface(self.tokenizer, vocab_size=vocab))
        self.lock = threading.Lock()
        self.quotes = torch.zeros(vocab)
        if close_strings:
            self.quotes[
                [
                    i
                    for t, i in self.tokenizer.get_vocab().items()
                    if '"' in self.tokenizer.convert_tokens_to_string([t])
                ]
            ] = 8.0

    def load(self, name: str, path: str) -> None:
        self.model.load_adapter(path, adapter_name=name, is_trainable=False)

    def names(self) -> list[str]:
        return list(self.model.peft_config)

    def complete(self, body: dict) -> dict:
        prompt = list(body["prompt"])
        temperature = float(body.get("temperature") if body.get("temperature") is not None else 1.0)
        structured = body.get("structured_outputs") or {}
        schema, compact = structured.get("json"), bool(structured.get("disable_any_whitespace"))
        grammar = schema and self.compiler.compile_json_schema(json.dumps(schema), any_whitespace=not compact)
        matcher = xgr.GrammarMatcher(grammar) if grammar else None
        mask = xgr.allocate_token_bitmask(1, self.model.config.vocab_size)
        generator = torch.Generator().manual_seed(int(body.get("seed") or 0))
        ids, logprobs, past, step_in = [], [], None, torch.tensor([prompt])
        budget = int(body.get("max_tokens") or 16)
        with self.lock, torch.no_grad():
            self.model.set_adapter(body["model"])
            for n in range(budget):
                out = self.model(input_ids=step_in, past_key_values=past, use_cache=True)
                past, logits = out.past_key_values, out.logits[:, -1].float()
                if matcher is not None:
                    if 2 * n >= budget:
                        logits += self.quotes[: logits.shape[-1]]
                    matcher.fill_next_token_bitmask(mask)
                    xgr.apply_token_bitmask_inplace(logits, mask)
                if temperature > 0:
                    logp = torch.log_softmax(logits / temperature, -1)[0]
                    token = int(torch.multinomial(logp.exp(), 1, generator=generator))
                else:
                    logp = torch.log_softmax(logits, -1)[0]
                    token = int(logp.argmax())
                ids.append(token)
                logprobs.append(float(logp[token]))
                if matcher is not None:
                    matcher.accept_token(token)
                if token == self.tokenizer.eos_token_id:
                    break
                step_in = torch.tensor([[token]])
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        choice = {"index": 0, "text": text, "token_ids": ids, "finish_reason": "stop"}
        if body.get("logprobs") is not None:
            choice["logprobs"] = {"token_logprobs": logprobs, "tokens": [f"token_id:{t}" for t in ids]}
        usage = {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)}
        return {"object": "text_completion", "model": body["model"], "choices": [choice], "usage": usage}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("base")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--lora-modules", nargs="*", default=[])
    parser.add_argument("--close-strings", action="store_true")
    args, _ = parser.parse_known_args()  # other vLLM arguments are recorded, not interpreted

    def record(entry: dict) -> None:
        with open(args.record, "a") as f:
            f.write(json.dumps(entry) + "\n")

    record({"argv": sys.argv[1:], "runtime_lora": os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING")})
    policy = Policy(args.base, dict(m.split("=", 1) for m in args.lora_modules), args.close_strings)
    runtime = os.environ.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "").lower() in ("true", "1")
    app = FastAPI()

    def refused(message: str, status: int = 400) -> JSONResponse:
        return JSONResponse({"object": "error", "message": message, "code": status}, status_code=status)

    @app.get("/health")
    def health() -> dict:
        return {}

    @app.get("/v1/models")
    def models() -> dict:
        return {"object": "list", "data": [{"id": name, "object": "model"} for name in policy.names()]}

    @app.post("/v1/load_lora_adapter")
    def load(body: dict) -> JSONResponse:
        if not runtime:
            return refused("runtime LoRA updating is off (VLLM_ALLOW_RUNTIME_LORA_UPDATING)")
        with policy.lock:
            policy.load(body["lora_name"], body["lora_path"])
        record({"loaded": body["lora_name"], "path": body["lora_path"]})
        return JSONResponse(f"Success: LoRA adapter '{body['lora_name']}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    def unload(body: dict) -> JSONResponse:
        if not runtime:
            return refused("runtime LoRA updating is off (VLLM_ALLOW_RUNTIME_LORA_UPDATING)")
        with policy.lock:
            policy.model.delete_adapter(body["lora_name"])
        record({"unloaded": body["lora_name"]})
        return JSONResponse(f"Success: LoRA adapter '{body['lora_name']}' removed successfully.")

    @app.post("/v1/completions")
    def completions(body: dict) -> JSONResponse:
        if body.get("model") not in policy.names():
            return refused(f"The model `{body.get('model')}` does not exist.", 404)
        record({"model": body["model"]})
        return JSONResponse(policy.complete(body))

    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
