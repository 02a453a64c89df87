"""Episode GRPO's rollouts through an inference server (vLLM) serving the policy being trained: ``rollout_server:``
in an episode-GRPO config (``training.episode_grpo``).

On a GPU, generating the rollouts with transformers is the slow half of a step; vLLM is many times faster, and it
is how TRL and SOTOPIA-RL generate. With ``rollout_server`` set:

1. the server starts once, before the first step, with that step's policy as the LoRA adapter ``policy``, and
   ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` in its environment, so that it may load adapters while it runs;
2. every later step the trainer saves its adapter (``OUTPUT_DIR/rollout_adapters/step-N``), loads it under a new
   name (``POST /v1/load_lora_adapter``), plays the step's episodes with it, and unloads the step before's;
3. each policy turn is a ``POST /v1/completions`` on the prompt's token ids (rendered here with the policy's chat
   template, so they are the ids the trainer scores), asking for the sampled ids (``return_token_ids``) and
   their log-probabilities (``logprobs: 0``) under the turn's JSON schema (``structured_outputs``). With
   ``--logprobs-mode processed_logprobs`` (in the default command) those are the sampler's: temperature and
   grammar mask applied;
4. before the update, the trainer scores the sampled ids under its own weights (one forward pass, no gradient):
   the policy's log-probabilities at rollout. The loss's truncated importance weight ``min(pi / sampler, cap)``
   then corrects both the grammar mask and any numeric difference between server and trainer (what TRL calls
   vLLM importance-sampling correction).

The partner and the evaluator are not served here (``api_base`` serves them). The local backend's guards (no
copying runs of earlier turns, no repeated openings, the repetition penalty) do not apply on the server.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ConfigDict

from sotopia_env.backends.base import ChatRequest, Completion, describe, prompt_text
from sotopia_env.backends.loop_sessions import LoopSessions
from sotopia_env.training.policy_server import SERVED_MODEL, PolicyServer, PolicyServerConfig, PolicyServerError

ROLLOUT_COMMAND = (
    "vllm serve {base_model} --enable-lora --max-lora-rank 64 --lora-modules policy={adapter} "
    "--logprobs-mode processed_logprobs --port {port}"
)
RUNTIME_LORA = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
ADAPTERS_DIR = "rollout_adapters"


@dataclass
class RolloutServerConfig(PolicyServerConfig):
    """How to serve the policy's rollouts (see the module docstring); the fields of ``policy_server``."""

    __pydantic_config__ = ConfigDict(extra="forbid")
    section = "rollout_server"

    command: str = ROLLOUT_COMMAND


class ServedPolicyBackend:
    """The policy's turns as ``/v1/completions`` on ``api_base``'s adapter ``name``: each completion records the
    prompt ids, the ids the server sampled and their sampler log-probabilities (``meta``, as ``LocalBackend``
    records them, except ``logprobs``: the trainer fills it in). A failed call is a completion with ``error``."""

    def __init__(self, api_base: str, name: str, tokenizer: Any, timeout_s: float = 600.0) -> None:
        self.api_base, self.model, self.tokenizer, self.timeout_s = api_base, name, tokenizer, timeout_s
        self._sessions = LoopSessions()

    async def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        session = await self._sessions.get()
        return list(await asyncio.gather(*(self._one(session, r) for r in requests)))

    def close(self) -> None:
        """Nothing to free here (the server holds the weights)."""

    def body(self, request: ChatRequest, prompt_ids: list[int]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model, "prompt": prompt_ids, "max_tokens": request.max_new_tokens,
            "temperature": request.temperature, "top_p": request.top_p, "seed": request.seed, "logprobs": 0,
            "return_token_ids": True,
        }  # fmt: skip
        if request.json_schema is not None:  # compact JSON, as the local backend's grammar writes it
            body["structured_outputs"] = {"json": request.json_schema, "disable_any_whitespace": True}
        return body

    async def _one(self, session: Any, request: ChatRequest) -> Completion:
        import aiohttp

        text = prompt_text(request.messages, self.tokenizer)
        prompt_ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        started = time.perf_counter()
        try:
            url, timeout = f"{self.api_base}/completions", aiohttp.ClientTimeout(total=self.timeout_s)
            async with session.post(url, json=self.body(request, prompt_ids), timeout=timeout) as reply:
                data = await reply.json(content_type=None)
                if reply.status != 200:
                    raise RuntimeError(f"HTTP {reply.status}: {_message(data)}")
            choice = data["choices"][0]
            ids, logprobs = list(choice["token_ids"]), list(choice["logprobs"]["token_logprobs"])
            if len(ids) != len(logprobs):
                raise RuntimeError(f"{len(ids)} token ids but {len(logprobs)} log-probabilities")
        except Exception as exc:  # one turn's failure: the agent's retry policy decides
            return Completion("", latency_s=time.perf_counter() - started, error=f"rollout server: {describe(exc)}")
        meta = {"prompt_ids": prompt_ids, "token_ids": ids, "logprobs": None, "sampler_logprobs": logprobs}
        return Completion(
            choice["text"], len(prompt_ids), len(ids), time.perf_counter() - started, meta=meta
        )  # fmt: skip


def _message(data: Any) -> str:
    if isinstance(data, dict):
        error = data.get("error", data.get("message", data))
        return str(error.get("message", error) if isinstance(error, dict) else error)[:300]
    return str(data)[:300]


class RolloutServer:
    """The server for a run's rollouts: started at the first step with that step's adapter, then given each
    step's adapter under a new name. A context manager that stops the server."""

    def __init__(self, config: RolloutServerConfig, out: Path, base_model: str, tokenizer: Any) -> None:
        self.config, self.base_model, self.tokenizer = config, base_model, tokenizer
        self.adapters = out / ADAPTERS_DIR
        self.log_path = out / "rollout_server.log"
        self.server: PolicyServer | None = None
        self.served: tuple[str, Path] | None = None  # the adapter loaded at runtime: (name, its folder)

    def __enter__(self) -> RolloutServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.stop()

    def backend(self, model: Any, step: int) -> ServedPolicyBackend:
        """Serve ``model``'s trained adapter as it is now (step ``step``) and a backend that plays it."""
        from sotopia_env.model_ref import write_model_ref

        folder = self.adapters / f"step-{step}"
        shutil.rmtree(folder, ignore_errors=True)
        model.save_pretrained(str(folder), selected_adapters=["default"])
        if self.server is None:
            write_model_ref(folder, self.base_model, ".", "")
            self.server = PolicyServer(self.config, str(folder), self.log_path, env=RUNTIME_LORA)
            self.server.start()
            return ServedPolicyBackend(self.server.api_base, SERVED_MODEL, self.tokenizer)
        name = f"policy-step-{step}"
        self._post("load_lora_adapter", {"lora_name": name, "lora_path": str(folder.resolve())})
        if self.served is not None:
            self._post("unload_lora_adapter", {"lora_name": self.served[0]})
            shutil.rmtree(self.served[1], ignore_errors=True)
        self.served = (name, folder)
        return ServedPolicyBackend(self.server.api_base, name, self.tokenizer)

    async def guard(self, work: Any) -> Any:
        """``work``'s result, or ``PolicyServerError`` when the server exits first."""
        assert self.server is not None
        return await self.server.guard(work)

    def _post(self, route: str, body: dict[str, Any]) -> None:
        assert self.server is not None
        request = urllib.request.Request(
            f"{self.server.api_base}/{route}", json.dumps(body).encode(), {"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.config.start_timeout):
                return
        except urllib.error.HTTPError as exc:
            said = exc.read().decode(errors="replace").strip()[:300]
            raise PolicyServerError(
                f"rollout server: POST /v1/{route} {body['lora_name']!r} answered {exc.code}: {said}; "
                f"vLLM needs --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; log: {self.log_path}"
            ) from None
        except OSError as exc:
            raise PolicyServerError(f"rollout server: POST /v1/{route} failed ({exc}); log: {self.log_path}") from None
