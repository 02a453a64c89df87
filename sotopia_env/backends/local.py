"""The local transformers backend: batched generation on this machine, JSON constrained by xgrammar.

Concurrent ``generate`` calls (many agents, many episodes, from any event loop) are served by a
continuous-batching scheduler (``scheduler.py``): a request joins the running batch at the next decoding step
and leaves it when it ends, every row with its own logits processors and keys/values in a slot cache within
``kv_cache_mb`` (``slot_cache.py``). It runs in a worker thread while there is work, so the event loop keeps
collecting requests while the model runs. ``executor=`` picks that thread: code that also trains the model
(episode GRPO) passes its one torch thread, because generating on a different thread from the one that ran
the backward pass was twice as slow on CPU (each thread has its own allocator arena and OpenMP team).

Models whose cache the scheduler cannot hold (sliding windows, linear attention: ``prefix_cache.supports``),
a backend built with ``continuous=False``, and models whose generation config asks ``generate`` for logits
processors of its own go through ``model.generate`` instead: requests collected for ``batch_window_s`` run as
one batch (left padding) until its longest answer ends. Such a batch holds requests with the same sampling
settings (greedy, or the same temperature and top_p; and the same ``repetition_penalty``, which counts the
reply's own tokens only); ``max_new_tokens`` and the JSON schema may differ per row. Both ways build a row's
processors alike (``_processors``), so they give the same replies.

Requests with a ``json_schema`` are constrained
by an xgrammar matcher per row, so their output is JSON that follows the schema, unless ``max_new_tokens``
ends it first: that text is returned as is (``meta["finish_reason"] ==
"length"``) and counted in ``stats.json_truncated``. A ``tools`` request with a ``call_schema`` (a policy trained
through tool calls, ``sotopia_env.tool_calls``) is constrained alike to one tool call that follows it, written as the
chat template writes a call (``tool_wire.call_format``: Hermes ``<tool_call>\n{"name": ..., "arguments": ...}\n
</tool_call>``), then a stop token. A request's ``avoid_copying`` texts (an agent's earlier
turns) are kept from being copied run by run, and its argument from opening as one of them did (``no_copy.py``).

Prompt prefixes are cached (``prefix_cache.py``): an agent's prompt repeats its previous prompt's system
message and conversation, so only the new part of each prompt is prefilled; ``prefix_cache_mb=0`` turns
that off. Rows admitted together (or of one batch) that share a prefix no entry holds yet (the same first
prompt for every episode of a GRPO group) have it prefilled once for all. ``stats.prefix_reused_tokens``
counts the prompt tokens not recomputed, ``stats.shared_prefixes`` the prefixes shared that way.

A request with ``logprobs=True`` gets what was sampled in ``meta``: ``prompt_ids`` (its prompt's ids, no
padding), ``token_ids`` (the sampled ids, the stop token included when ``finish_reason == "stop"``; never
re-tokenised text: under a grammar the model may pick a split the tokenizer would not), ``logprobs`` (per token,
log-softmax(raw logits / T), T the sampling temperature or 1 when greedy: the unconstrained policy's value, the
one a training forward pass recomputes) and ``sampler_logprobs`` (under the distribution the token was drawn
from: after the repetition penalty, the grammar mask and its closing steer, no-copy, temperature, top-k and
top-p; 0.0 for greedy rows, whose token was the argmax). Two ``_Recorder`` processors take them, each keeping
one step's [rows, vocab] log-softmax until the next step names the token: the first in the processor list sees
the raw logits; the last, when sampling, sees the final distribution, since the batch then applies temperature,
top-k and top-p itself ahead of it (generate appends its own warpers after the processors passed in, so it is
asked for none). The tokens sampled are the same as without recording, seed for seed. Models whose generation
config adds other logits processors of generate's own cannot be recorded (such a request fails as a bad request),
except for a default repetition penalty, which is moved behind the first recorder.

Seeding is per request: a sampled row draws its tokens with a generator of its own, seeded by the request's
``seed`` (``_RowSampler``), so a seeded reply does not depend on which requests shared its batch, beyond the
float noise of batched arithmetic. Requests without a seed draw from torch's global stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import gc
import inspect
import json
import threading
import time
import weakref
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    StoppingCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from sotopia_env.backends import prefix_cache
from sotopia_env.backends.base import ChatRequest, Completion, describe, prompt_text
from sotopia_env.backends.devices import pick_device, pick_dtype
from sotopia_env.backends.no_copy import NoCopy, NoRepeatedOpening, TokenTexts, banned_tables, openings
from sotopia_env.backends.scheduler import Plan, Scheduler, Waiting
from sotopia_env.backends.topic_bias import TopicBias, favoured_tokens
from sotopia_env.model_ref import model_prompt, read_model_ref

if TYPE_CHECKING:
    import xgrammar as xgr


@dataclass
class LocalStats:
    """Counters over the backend's life."""

    generate_calls: int = 0  # batches started: admissions of the scheduler (one prefill each), or model.generate calls
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    json_truncated: int = 0  # constrained outputs cut by max_new_tokens before the JSON closed
    failed_batches: int = 0
    prefix_reused_tokens: int = 0  # prompt tokens whose keys/values came from the prefix cache
    shared_prefixes: int = 0  # prefixes that several rows of a batch shared, prefilled once for all of them
    decode_steps: int = 0  # the scheduler's decoding steps (one token for every running row)
    peak_rows: int = 0  # the most rows the scheduler ran at once
    kv_peak_bytes: int = 0  # the most its slot cache held
    cancelled: int = 0  # rows dropped because their caller went away


@dataclass
class _Pending:
    request: ChatRequest
    future: asyncio.Future[Completion]
    enqueued: float = field(default_factory=time.perf_counter)


@dataclass
class _LoopQueue:
    pending: list[_Pending] = field(default_factory=list)
    task: asyncio.Task[None] | None = None


class LocalBackend:
    """A transformers causal LM served to many concurrent callers through one batch."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        name: str,
        *,
        max_batch_size: int = 16,
        batch_window_s: float = 0.01,
        prefix_cache_mb: int = 4096,
        kv_cache_mb: int = 2048,
        continuous: bool = True,
        executor: Executor | None = None,
        prompt: str = "chat",  # a name of sotopia_env.prompt.PROMPTS (the backends do not import the world)
    ) -> None:
        self.model = name
        self.preferred_prompt = prompt  # what an ``LLMAgent`` on this backend prompts with (sotopia_env.prompt)
        self.lm = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.max_batch_size = max(1, max_batch_size)
        self.batch_window_s = batch_window_s
        self.stats = LocalStats()
        tokenizer.padding_side = "left"
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self._stop_ids = _stop_token_ids(model, tokenizer)
        self._vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self._closers = closing_tokens(tokenizer)
        self._compiler: xgr.GrammarCompiler | None = None
        self._grammars: dict[str, xgr.CompiledGrammar] = {}
        # a grammar whose reply ends in more than JSON's closers (a tool call's suffix): the steps it keeps to close
        self._reserves: dict[int, tuple[xgr.CompiledGrammar, int]] = {}
        self._texts: TokenTexts | None = None  # every token's text, built at the first request that needs it
        self._tool_template: str | None = None  # a ``tools`` request's template ("": the tokenizer's own)
        self._lock = threading.Lock()  # one batch at a time, whatever the event loop
        self._queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopQueue] = weakref.WeakKeyDictionary()
        self._closed = False
        self._executor = executor  # None: asyncio's default threads
        cacheable = prefix_cache_mb > 0 and prefix_cache.supports(model)
        self._prefix = prefix_cache.PrefixCache(prefix_cache_mb << 20) if cacheable else None
        base_model = model.get_base_model() if hasattr(model, "get_base_model") else model  # under a PEFT wrapper
        forward_params = inspect.signature(base_model.forward).parameters  # transformers 5 renamed past_key_values
        self._cache_kwarg = "cache" if "cache" in forward_params else "past_key_values"
        schedulable = continuous and prefix_cache.supports(model)
        self._scheduler = Scheduler(self, kv_cache_mb) if schedulable else None

    @classmethod
    def from_spec(
        cls,
        spec: str,
        adapter: str | None = None,
        device: str = "auto",
        dtype: str | torch.dtype | None = None,
        max_batch_size: int = 16,
        batch_window_s: float = 0.01,
        prefix_cache_mb: int = 4096,
        kv_cache_mb: int = 2048,
        continuous: bool = True,
        **_: Any,
    ) -> LocalBackend:
        """Load an alias, hub id, model dir, or trained-model dir (``sotopia_model.json``), plus an optional LoRA.
        Its agents prompt as ``resolve.prompt_for_model(spec)`` says: a trained model as it was trained."""
        from transformers import AutoTokenizer

        from sotopia_env.embedded_models import resolve_model_path

        prompt = model_prompt(spec) or "chat"  # as ``resolve.prompt_for_model``: a trained model as it was trained
        base, adapter = read_model_ref(spec, adapter)
        dev = pick_device(device)
        path = resolve_model_path(base)
        tok_source = adapter if adapter and (Path(adapter) / "tokenizer_config.json").is_file() else path
        tokenizer = AutoTokenizer.from_pretrained(tok_source)
        model = shared_base(path, pick_dtype(dtype, dev), dev)
        if adapter:
            model = with_adapter(model, adapter)
        name = f"{base}+{adapter}" if adapter else base
        return cls(
            model,
            tokenizer,
            name,
            max_batch_size=max_batch_size,
            batch_window_s=batch_window_s,
            prefix_cache_mb=prefix_cache_mb,
            kv_cache_mb=kv_cache_mb,
            continuous=continuous,
            prompt=prompt,
        )

    @property
    def generate_calls(self) -> int:
        return self.stats.generate_calls

    async def generate(self, requests: list[ChatRequest]) -> list[Completion]:
        if not requests:
            return []
        loop = asyncio.get_running_loop()
        if self._closed:
            return [Completion(text="", error="local backend is closed") for _ in requests]
        if self._scheduler is not None and not self._generate_adds_processors(requests):
            waiting = [Waiting(r, loop.create_future(), loop) for r in requests]
            if self._scheduler.submit(waiting):
                worker = loop.run_in_executor(self._executor, self._scheduler.run)
                worker.add_done_callback(lambda done: done.exception())  # run answers its own failures
            return list(await asyncio.gather(*(w.future for w in waiting)))
        queue = self._queues.setdefault(loop, _LoopQueue())
        items = [_Pending(r, loop.create_future()) for r in requests]
        queue.pending.extend(items)
        if queue.task is None or queue.task.done():
            queue.task = loop.create_task(self._drain(queue))
        return list(await asyncio.gather(*(item.future for item in items)))

    def generate_now(self, requests: list[ChatRequest]) -> list[Completion]:
        """``generate`` for code without an event loop (a trainer's rollouts): blocks until every answer is in.
        The scheduler runs in the calling thread, unless a worker is already at work (then it waits for it)."""
        if self._closed:
            return [Completion(text="", error="local backend is closed") for _ in requests]
        if self._scheduler is None or self._generate_adds_processors(requests):
            return self._run_batches(requests)
        waiting = [Waiting(r, concurrent.futures.Future()) for r in requests]
        if self._scheduler.submit(waiting):
            self._scheduler.run()
        return [w.future.result() for w in waiting]

    def _run_batches(self, requests: list[ChatRequest]) -> list[Completion]:
        """``requests`` through ``generate``, in batches of like sampling settings and ``max_batch_size`` rows."""
        out: list[Completion] = [Completion(text="", error="not generated")] * len(requests)
        groups: dict[tuple[float, float, float], list[int]] = {}
        for i, request in enumerate(requests):
            groups.setdefault(_sampling_key(request), []).append(i)
        for rows in groups.values():
            for k in range(0, len(rows), self.max_batch_size):
                chunk = rows[k : k + self.max_batch_size]
                for i, completion in zip(chunk, self._run_batch([requests[i] for i in chunk]), strict=True):
                    out[i] = completion
        return out

    async def _drain(self, queue: _LoopQueue) -> None:
        """Run batches while requests keep arriving; each batch waits ``batch_window_s`` for company."""
        while True:
            await asyncio.sleep(self.batch_window_s)
            queue.pending = [p for p in queue.pending if not p.future.done()]  # drop cancelled callers
            if not queue.pending:
                return
            batch = self._take(queue)
            try:
                results = await self._in_worker([p.request for p in batch])
            except Exception as exc:  # _run_batch reports its own errors; this is a last resort
                results = [Completion(text="", error=f"local backend: {describe(exc)}") for _ in batch]
            for item, completion in zip(batch, results, strict=True):
                if not item.future.done():
                    item.future.set_result(completion)

    async def _in_worker(self, requests: list[ChatRequest]) -> list[Completion]:
        """``_run_batch`` off the event loop: on ``executor`` when one was given, else on asyncio's threads
        (``to_thread``, which also carries the caller's context variables)."""
        if self._executor is None:
            return await asyncio.to_thread(self._run_batch, requests)
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._run_batch, requests)

    def _take(self, queue: _LoopQueue) -> list[_Pending]:
        """The oldest request and up to ``max_batch_size - 1`` more with the same sampling settings."""
        key = _sampling_key(queue.pending[0].request)
        batch: list[_Pending] = []
        rest: list[_Pending] = []
        for item in queue.pending:
            if len(batch) < self.max_batch_size and _sampling_key(item.request) == key:
                batch.append(item)
            else:
                rest.append(item)
        queue.pending = rest
        return batch

    def _run_batch(self, requests: list[ChatRequest]) -> list[Completion]:
        """Blocking: one batch (worker thread). Errors become failed completions, never exceptions."""
        with self._lock:
            if self._closed:
                return [Completion(text="", error="local backend is closed") for _ in requests]
            results: list[Completion | None] = [None] * len(requests)
            rows: list[int] = []
            prompts: list[str] = []
            grammars: list[xgr.CompiledGrammar | None] = []
            for i, request in enumerate(requests):
                try:
                    prompt, grammar = self._validated(request)
                except Exception as exc:
                    results[i] = Completion(text="", error=f"bad request: {describe(exc)}")
                    continue
                rows.append(i)
                prompts.append(prompt)
                grammars.append(grammar)
            if rows:
                start = time.perf_counter()
                try:
                    done = self._generate_rows([requests[i] for i in rows], prompts, grammars)
                except Exception as exc:
                    self.stats.failed_batches += 1
                    if self.device.type == "cuda":
                        torch.cuda.empty_cache()
                    error = f"local generation failed: {describe(exc)}"
                    done = [Completion(text="", error=error, latency_s=time.perf_counter() - start) for _ in rows]
                for i, completion in zip(rows, done, strict=True):
                    results[i] = completion
            self.stats.requests += len(requests)
            return [c if c is not None else Completion(text="", error="not generated") for c in results]

    def _validated(self, request: ChatRequest) -> tuple[str, xgr.CompiledGrammar | None]:
        """A request's prompt text and compiled constraint; raises on a request that cannot run."""
        if request.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if request.logprobs:
            self._check_recordable(sampled=request.temperature > 0)
        return self._prompt(request.messages, request.tools), self._constraint(request)

    def _generate_adds_processors(self, requests: list[ChatRequest]) -> bool:
        """Whether the model's generation config has settings from which ``generate`` would build processors of
        its own (beyond a repetition penalty, temperature, top-k and top-p): such requests go through
        ``generate``, which applies them, rather than the scheduler, which does not."""
        config = self.lm.generation_config
        if any(is_set(getattr(config, name, None)) for name, is_set in _ADDED_AHEAD.items()):
            return True
        sampled = any(r.temperature > 0 for r in requests)
        return sampled and any(is_set(getattr(config, name, None)) for name, is_set in _ADDED_AFTER.items())

    def _generate_rows(
        self, requests: list[ChatRequest], prompts: list[str], grammars: list[xgr.CompiledGrammar | None]
    ) -> list[Completion]:
        start = time.perf_counter()
        tokens = [
            torch.tensor(ids, dtype=torch.long)
            for ids in self.tokenizer(prompts, add_special_tokens=False)["input_ids"]
        ]
        hits = self._hits(tokens)
        layout, cache = prefix_cache.assemble(self.lm, tokens, hits, int(self.tokenizer.pad_token_id))
        prompt_len = layout.width
        limits = [r.max_new_tokens for r in requests]
        pads = (layout.attention_mask != 0).int().argmax(dim=1)
        plan = self._processors(requests, grammars, limits, prompt_len, pads, by_generate=True)
        processors, policy, sampler, sampling = plan.processors, plan.policy, plan.sampler, plan.sampling
        stopping = StoppingCriteriaList([_RowLimits(limits, prompt_len)]) if len(set(limits)) > 1 else None
        self.stats.generate_calls += 1
        with torch.inference_mode():
            out = self.lm.generate(
                input_ids=layout.input_ids,
                attention_mask=layout.attention_mask,
                **({self._cache_kwarg: cache} if self._prefix is not None else {}),
                **sampling,
                max_new_tokens=max(limits),
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=sorted(self._stop_ids),
                logits_processor=processors,
                stopping_criteria=stopping,
            )
        recorded: list[dict[str, list[Any]] | None] = [None] * len(requests)
        if policy is not None:
            logprobs = policy.finish(out).cpu().tolist()
            # a greedy row's token is the argmax of what it was chosen from: probability one
            chosen = sampler.finish(out).cpu().tolist() if sampler is not None else [[0.0] * max(limits)] * len(out)
            recorded = [
                {"prompt_ids": t.tolist(), "logprobs": lp, "sampler_logprobs": sp} if r.logprobs else None
                for r, t, lp, sp in zip(requests, tokens, logprobs, chosen, strict=True)
            ]
        latency = time.perf_counter() - start
        if self._prefix is not None:
            self.stats.prefix_reused_tokens += sum(h.length for h in hits)
            for entry, hit in zip(prefix_cache.extract(cache, layout, tokens), hits, strict=True):
                self._prefix.add(entry, replaces=prefix_cache.superseded(hit))
        return [
            self._completion(
                out[row, prompt_len : prompt_len + limit].tolist(),
                layout.lengths[row],
                constrained=grammars[row] is not None,
                latency=latency,
                batch_size=len(requests),
                recorded=recorded[row],
            )
            for row, limit in enumerate(limits)
        ]

    def _processors(
        self,
        requests: list[ChatRequest],
        grammars: list[xgr.CompiledGrammar | None],
        limits: list[int],
        prompt_len: int,
        pads: torch.Tensor,
        *,
        by_generate: bool,
    ) -> Plan:
        """The logits processors of rows that share sampling settings (``_sampling_key``), for prompts laid out
        in ``prompt_len`` columns (``pads`` of them padding, per row). ``by_generate``: ``generate`` runs them, and
        adds the model's default repetition penalty itself unless recording; otherwise (the scheduler) nothing
        is added to what is built here."""
        first = requests[0]
        sampled = first.temperature > 0
        recording = any(r.logprobs for r in requests)
        plan = Plan(LogitsProcessorList(), None, None, self._sampling_kwargs(first))
        processors = plan.processors
        if recording:  # see the module docstring; the sampled tokens are the same as without recording
            temperature = first.temperature if sampled else 1.0
            plan.policy = _Recorder(len(requests), max(limits), prompt_len, self.device, temperature)
            processors.append(plan.policy)
            plan.sampling["repetition_penalty"] = 1.0
        default_penalty = self.lm.generation_config.repetition_penalty
        if first.repetition_penalty == 1.0 and default_penalty not in (None, 1.0) and (recording or not by_generate):
            # generate would put the model's default penalty (prompt included) ahead of the recorder; ours
            # goes right after it instead, built as generate builds it
            processors.append(RepetitionPenaltyLogitsProcessor(float(default_penalty), prompt_ignore_length=pads))
        if first.repetition_penalty != 1.0:  # over the reply only: the prompt's words stay free to use
            processors.append(RepetitionPenaltyLogitsProcessor(float(first.repetition_penalty), prompt_len))
        if any(g is not None for g in grammars):
            reserves = [self._reserves.get(id(g), (g, CLOSE_RESERVE))[1] for g in grammars]
            processors.append(_GrammarMask(grammars, limits, self._vocab_size, self._closers, reserves))
        if any(r.favour_words and r.favour_bias for r in requests):
            tokens = [favoured_tokens(self.tokenizer, r.favour_words) for r in requests]
            processors.append(TopicBias(tokens, [r.favour_bias for r in requests]))
        if any(r.avoid_copying for r in requests):  # after the grammar: a row is never left without a token
            tables = banned_tables(self.tokenizer, [r.avoid_copying for r in requests])
            processors.append(NoCopy(tables, prompt_len))
            starts = [openings(r.avoid_copying) for r in requests]
            if any(starts):
                processors.append(NoRepeatedOpening(starts, self._token_texts(), self.tokenizer, prompt_len))
        if sampled:  # generate's own warpers would come after the last recorder and the row sampler: ours instead
            processors.extend(self._warpers(first))
            plan.sampling.update(temperature=1.0, top_k=0, top_p=1.0)
            if recording:
                plan.sampler = _Recorder(len(requests), max(limits), prompt_len, self.device)
                processors.append(plan.sampler)
            processors.append(_RowSampler([self._generator(r.seed) for r in requests]))
        return plan

    def _hits(self, tokens: list[torch.Tensor]) -> list[prefix_cache.Hit]:
        """Each row's cached prefix. Prefixes that several rows share and no entry holds yet (a GRPO group's first
        turn: the same prompt for every episode) are prefilled once first, so that every row finds them."""
        if self._prefix is None:
            return [prefix_cache.MISS] * len(tokens)
        hits = [self._prefix.lookup(t) for t in tokens]
        shared = prefix_cache.shared_prefixes(tokens, hits, self._prefix.min_tokens)
        if not shared:
            return hits
        self._prefill(shared)
        return [self._prefix.lookup(t) for t in tokens]

    def _prefill(self, prefixes: list[torch.Tensor]) -> None:
        """Run ``prefixes`` through the model (only their uncached part) and store their keys/values."""
        assert self._prefix is not None
        hits = [self._prefix.lookup(p) for p in prefixes]
        layout, cache = prefix_cache.assemble(self.lm, prefixes, hits, int(self.tokenizer.pad_token_id))
        positions = (layout.attention_mask.cumsum(-1) - 1).clamp(min=0)
        with torch.inference_mode():
            self.lm(
                input_ids=layout.input_ids[:, layout.cached :],
                attention_mask=layout.attention_mask,
                position_ids=positions[:, layout.cached :],
                logits_to_keep=1,
                **{self._cache_kwarg: cache},
            )
        self.stats.prefix_reused_tokens += sum(h.length for h in hits)
        self.stats.shared_prefixes += len(prefixes)
        for entry in prefix_cache.extract(cache, layout, prefixes):
            self._prefix.add(entry, replaces=[])

    def _completion(
        self,
        tokens: list[int],
        prompt_tokens: int,
        *,
        constrained: bool,
        latency: float,
        batch_size: int,
        recorded: dict[str, list[Any]] | None = None,
    ) -> Completion:
        """One row's output: up to (not including) the first stop token, or all of it when the limit cut it.
        ``recorded`` (a row that asked for ``logprobs``) adds the ids and their log-probabilities to ``meta``."""
        end = next((k for k, t in enumerate(tokens) if t in self._stop_ids), None)
        finish = "length" if end is None else "stop"
        sampled = tokens if end is None else tokens[: end + 1]  # the stop token was sampled too
        tokens = tokens if end is None else tokens[:end]
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        if finish == "length" and constrained and not _is_json(text):
            self.stats.json_truncated += 1
        self.stats.prompt_tokens += prompt_tokens
        self.stats.completion_tokens += len(tokens)
        meta: dict[str, Any] = {"finish_reason": finish, "batch_size": batch_size, "constrained": constrained}
        if recorded is not None:
            n = len(sampled)
            meta.update(
                prompt_ids=recorded["prompt_ids"],
                token_ids=sampled,
                logprobs=recorded["logprobs"][:n],
                sampler_logprobs=recorded["sampler_logprobs"][:n],
            )
        return Completion(text, prompt_tokens, len(tokens), latency, meta=meta)

    def _token_texts(self) -> TokenTexts:
        if self._texts is None:
            self._texts = TokenTexts(self.tokenizer, self._vocab_size)
        return self._texts

    def _generator(self, seed: int | None) -> torch.Generator | None:
        """A request's own random stream: seeded by its ``seed``; without one, torch's global stream."""
        return None if seed is None else torch.Generator(device=self.device).manual_seed(seed)

    def _sampling_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        if request.temperature <= 0:
            return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
        top_k = self._top_k()
        return {"do_sample": True, "temperature": request.temperature, "top_p": request.top_p, "top_k": top_k}

    def _top_k(self) -> int:
        return int(self.lm.generation_config.top_k or 0)  # the model's own default if it has one; else none

    def _warpers(self, request: ChatRequest) -> list[LogitsProcessor]:
        """The temperature, top-k and top-p warpers generate itself would add for ``request``, in its order."""
        warpers: list[LogitsProcessor] = []
        if request.temperature != 1.0:
            warpers.append(TemperatureLogitsWarper(float(request.temperature)))
        if self._top_k() != 0:
            warpers.append(TopKLogitsWarper(top_k=self._top_k(), min_tokens_to_keep=1))
        if request.top_p < 1.0:
            warpers.append(TopPLogitsWarper(top_p=float(request.top_p), min_tokens_to_keep=1))
        return warpers

    def _check_recordable(self, sampled: bool) -> None:
        """Raise when the model's generation config makes generate add logits processors that the recorders
        cannot stand around (ahead of the first, or, sampling, after the last); see ``_Recorder``."""
        config = self.lm.generation_config
        found = [name for name, is_set in _ADDED_AHEAD.items() if is_set(getattr(config, name, None))]
        if sampled:
            found += [name for name, is_set in _ADDED_AFTER.items() if is_set(getattr(config, name, None))]
        if found:
            raise ValueError(f"logprobs cannot be recorded with this model's generation config: {', '.join(found)}")

    def _prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> str:
        if not tools:
            return prompt_text(messages, self.tokenizer)
        return str(
            self.tokenizer.apply_chat_template(
                messages, tools=tools, chat_template=self._tools_template(), add_generation_prompt=True, tokenize=False
            )
        )

    def _tools_template(self) -> str | None:
        """The chat template of ``tools`` requests (None: the tokenizer's own, which renders tool calls)."""
        if self._tool_template is None:  # checked once: the tokenizer's own template when it renders tool calls
            from sotopia_env.backends.tool_wire import tool_template

            self._tool_template = tool_template(self.tokenizer) or ""
        return self._tool_template or None

    def _constraint(self, request: ChatRequest) -> xgr.CompiledGrammar | None:
        """The compiled grammar for a request's tool call, JSON schema or regex (cached), or None when
        unconstrained."""
        if request.tools and request.call_schema is not None:
            return self._grammar(json.dumps(_without_lengths_beside_patterns(request.call_schema)), "tool_call")
        if request.json_schema is not None:  # xgrammar keeps the property order
            return self._grammar(json.dumps(_without_lengths_beside_patterns(request.json_schema)), "json")
        if request.regex is not None:
            return self._grammar(request.regex, "regex")
        return None

    def _grammar(self, source: str, kind: str) -> xgr.CompiledGrammar:
        import xgrammar as xgr

        key = f"{kind}:{source}"
        if key not in self._grammars:
            if self._compiler is None:
                info = xgr.TokenizerInfo.from_huggingface(
                    self.tokenizer, vocab_size=self._vocab_size, stop_token_ids=sorted(self._stop_ids)
                )
                self._compiler = xgr.GrammarCompiler(info)
            if kind == "json":  # one-line JSON with fixed separators: no whitespace loops, fewer tokens
                self._grammars[key] = self._compiler.compile_json_schema(source, any_whitespace=False)
            elif kind == "tool_call":
                self._grammars[key] = self._tool_call_grammar(source)
            else:
                self._grammars[key] = self._compiler.compile_regex(source)
        return self._grammars[key]

    def _tool_call_grammar(self, schema: str) -> xgr.CompiledGrammar:
        """One tool call that follows ``schema``, as the ``tools`` template writes a call: its prefix, the call's
        one-line JSON (the template's separators), its suffix; the stop token follows (the matcher ends there)."""
        import xgrammar as xgr

        from sotopia_env.backends.tool_wire import call_format

        assert self._compiler is not None
        stops = [self.tokenizer.decode([t]) for t in sorted(self._stop_ids)]
        form = call_format(self.tokenizer, self._tools_template(), stops)
        parts = [xgr.Grammar.from_ebnf(f"root ::= {_ebnf_literal(form.prefix)}")] if form.prefix else []
        parts.append(xgr.Grammar.from_json_schema(schema, any_whitespace=False, separators=form.separators))
        if form.suffix:
            parts.append(xgr.Grammar.from_ebnf(f"root ::= {_ebnf_literal(form.suffix)}"))
        compiled = self._compiler.compile_grammar(xgr.Grammar.concat(*parts) if len(parts) > 1 else parts[0])
        tail = len(self.tokenizer(form.suffix, add_special_tokens=False)["input_ids"]) if form.suffix else 0
        self._reserves[id(compiled)] = (compiled, CLOSE_RESERVE + tail)  # room to close the JSON, then the suffix
        return compiled

    def close(self) -> None:
        """Free the weights; later requests fail with an error completion."""
        with self._lock:
            self._closed = True
            self.lm = None
            self._grammars.clear()
            self._reserves.clear()
            self._compiler = None
            if self._prefix is not None:
                self._prefix.clear()
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def __repr__(self) -> str:
        return f"LocalBackend({self.model!r}, device={self.device}, max_batch_size={self.max_batch_size})"


_loaded_bases: weakref.WeakValueDictionary[tuple[str, str, str], Any] = weakref.WeakValueDictionary()


def shared_base(path: str, dtype: torch.dtype, device: torch.device) -> Any:
    """The base model at ``path``, loaded once while any backend plays it or a LoRA on it (``with_adapter``): a
    pipeline's evaluation plays the trained adapter against its base model, which held two copies of the weights
    (0.5 GB each for SmolLM2-135M in fp32). Backends only read it (inference mode)."""
    from transformers import AutoModelForCausalLM

    key = (str(Path(path).resolve()) if Path(path).exists() else path, str(dtype), str(device))
    model = _loaded_bases.get(key)
    if model is None:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()
        _loaded_bases[key] = model
    return model


def with_adapter(base: Any, adapter: str) -> Any:
    """``base`` with the LoRA ``adapter`` on top, unmerged, on a copy of its modules that shares its weights (the
    copy keeps ``base`` alive): merging would write the adapter into weights that other backends play."""
    import copy

    from peft import PeftModel

    shared: dict[int, Any] = {id(t): t for t in (*base.parameters(), *base.buffers())}
    model = PeftModel.from_pretrained(copy.deepcopy(base, memo=shared), adapter).eval()
    object.__setattr__(model, "_shared_base", base)  # not a submodule; keeps the registry's entry while this plays
    return model


CLOSE_RESERVE = 6  # a row this close to its max_new_tokens closes its JSON ('"', '}', stop), once a character is whole
_CLOSING_TEXTS = ('"', '"}', "}", "]", '"]', "}}", '"}}', "]}", '"]}', "}]")


def closing_tokens(tokenizer: Any) -> list[tuple[int, str]]:
    """``(id, text)`` of the tokens that only close JSON (a quote, braces, brackets), each one token here."""
    found = {}
    for text in _CLOSING_TEXTS:
        encoded = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(encoded) == 1:
            found[int(encoded[0])] = text
    return sorted(found.items())


class _GrammarMask(LogitsProcessor):
    """Masks each constrained row's logits to what its xgrammar matcher allows; other rows are left alone.

    A row within its reserve (``CLOSE_RESERVE`` steps, more for a tool call: its suffix's tokens too) of its
    ``max_new_tokens`` is held to the closing tokens its grammar allows, when it allows any: the action schema's
    worded argument has no length bound in the grammar (a bounded repetition made the mask ~10,000x slower), so
    this is what lets a long reply still end as JSON (and a tool call's suffix, which the grammar alone allows
    once the JSON is closed).
    """

    def __init__(
        self,
        grammars: list[xgr.CompiledGrammar | None],
        limits: list[int],
        vocab_size: int,
        closers: list[tuple[int, str]] | None = None,
        reserves: list[int] | None = None,
    ) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self.matchers = [xgr.GrammarMatcher(g) if g is not None else None for g in grammars]
        self.limits = limits
        self.reserves = reserves or [CLOSE_RESERVE] * len(grammars)
        self.bitmask = xgr.allocate_token_bitmask(len(grammars), vocab_size)
        self.vocab_size = vocab_size
        self.closers = [c for c, _ in closers or [] if c < vocab_size]
        self.quote_closers = {c for c, text in closers or [] if text.startswith('"')}
        self.step = 0
        self.dead: set[int] = set()

    def _close(self, row: int) -> None:
        """Keep only the closing tokens that the row's mask allows (if any): the JSON ends in time."""
        allowed = [c for c in self.closers if (int(self.bitmask[row, c >> 5]) >> (c & 31)) & 1]
        quoted = [c for c in allowed if c in self.quote_closers]
        allowed = quoted or allowed  # inside a string, '}' and ']' are only more characters
        if not allowed:
            return
        words: dict[int, int] = {}
        for c in allowed:
            words[c >> 5] = words.get(c >> 5, 0) | (1 << (c & 31))
        self.bitmask[row].zero_()
        for word, bits in words.items():
            self.bitmask[row, word] = bits - (1 << 32) if bits >= 1 << 31 else bits  # int32, two's complement

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        active = []
        for i, matcher in enumerate(self.matchers):
            if matcher is None or i in self.dead or self.step >= self.limits[i]:
                continue
            if self.step > 0 and not matcher.is_terminated() and not matcher.accept_token(int(input_ids[i, -1])):
                self.dead.add(i)  # only happens once the row has stopped (padding follows)
                continue
            if not matcher.is_terminated():
                matcher.fill_next_token_bitmask(self.bitmask, i)
                if self.limits[i] - self.step <= self.reserves[i]:
                    self._close(i)
                active.append(i)
        self.step += 1
        if not active:
            return scores
        target = scores if scores.device.type in ("cpu", "cuda") else scores.cpu()
        self._xgr.apply_token_bitmask_inplace(
            target, self.bitmask.to(target.device), vocab_size=self.vocab_size, indices=active
        )
        return cast(torch.FloatTensor, target.to(scores.device))


class _RowSampler(LogitsProcessor):
    """Draws each row's token itself, from the final distribution (it comes last, after the warpers), with the
    row's own generator, and leaves only that token possible, so that generate's own draw takes it. A seeded
    request's reply therefore follows from its seed, whatever other requests shared its batch."""

    def __init__(self, generators: list[torch.Generator | None]) -> None:
        self.generators = generators

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = torch.softmax(scores.float(), dim=-1)
        chosen = torch.stack(
            [torch.multinomial(row, 1, generator=g) for row, g in zip(probs, self.generators, strict=True)]
        )
        only = torch.full_like(scores, float("-inf"))
        return cast(torch.FloatTensor, only.scatter_(1, chosen.to(scores.device), 0.0))


class _Recorder(LogitsProcessor):
    """Records, per row and step, the log-probability of the sampled token under the scores this processor sees
    (divided by ``temperature``), without changing them.

    A step's token is only known at the next call (``input_ids[:, -1]``), so each call keeps the current step's
    log-softmax ([rows, vocab]: memory stays O(rows x vocab), whatever the length) and gathers the previous
    step's; ``finish`` gathers the final step's from generate's output. Placed first, it sees the raw logits;
    placed last, the distribution the token is drawn from.
    """

    def __init__(self, rows: int, steps: int, prompt_len: int, device: torch.device, temperature: float = 1.0) -> None:
        self.values = torch.zeros(rows, steps, device=device)
        self.prompt_len = prompt_len
        self.temperature = float(temperature)
        self._pending: torch.Tensor | None = None
        self._pending_step = -1

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        step = input_ids.shape[1] - self.prompt_len
        self._gather(input_ids, step)
        scaled = scores if self.temperature == 1.0 else scores / self.temperature
        self._pending = torch.log_softmax(scaled.float(), dim=-1)
        self._pending_step = step
        return scores

    def _gather(self, input_ids: torch.Tensor, step: int) -> None:
        """Record the token at ``step - 1`` (the last of ``input_ids``) under the distribution kept for it."""
        if self._pending is not None and self._pending_step == step - 1 and 0 < step <= self.values.shape[1]:
            self.values[:, step - 1] = self._pending.gather(1, input_ids[:, -1:].to(self._pending.device)).squeeze(1)
        self._pending = None

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """[rows, steps] log-probabilities, once generate returned ``sequences`` (prompt and reply)."""
        self._gather(sequences, sequences.shape[1] - self.prompt_len)  # a no-op when generate undid a step
        return self.values


# Generation-config settings from which generate builds logits processors of its own (transformers'
# ``GenerationMixin._get_logits_processor``): those ahead of the processors passed in (where the first recorder
# must see raw logits), and, when sampling, the warpers after them (beyond temperature, top-k and top-p, which
# ``_warpers`` rebuilds ahead of the last recorder). The model's default repetition penalty is moved instead.
_ADDED_AHEAD: dict[str, Any] = {
    "guidance_scale": lambda v: v is not None and v != 1,
    "sequence_bias": lambda v: v is not None,
    "no_repeat_ngram_size": lambda v: bool(v),
    "bad_words_ids": lambda v: v is not None,
    "min_length": lambda v: bool(v),
    "min_new_tokens": lambda v: bool(v),
    "forced_bos_token_id": lambda v: v is not None,
    "forced_eos_token_id": lambda v: v is not None,
    "remove_invalid_values": lambda v: v is True,
    "exponential_decay_length_penalty": lambda v: v is not None,
    "suppress_tokens": lambda v: v is not None,
    "begin_suppress_tokens": lambda v: v is not None,
}
_ADDED_AFTER: dict[str, Any] = {
    "top_h": lambda v: v is not None,
    "min_p": lambda v: v is not None,
    "typical_p": lambda v: v is not None and v < 1.0,
    "epsilon_cutoff": lambda v: v is not None and 0.0 < v < 1.0,
    "eta_cutoff": lambda v: v is not None and 0.0 < v < 1.0,
    "watermarking_config": lambda v: v is not None,
}


class _RowLimits(StoppingCriteria):
    """Stops each row at its own ``max_new_tokens`` (generate's own limit is the batch's largest)."""

    def __init__(self, limits: list[int], prompt_len: int) -> None:
        self.limits = torch.tensor(limits)
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        generated = input_ids.shape[1] - self.prompt_len
        return cast(torch.BoolTensor, (self.limits <= generated).to(input_ids.device))


def _stop_token_ids(model: Any, tokenizer: Any) -> set[int]:
    ids = model.generation_config.eos_token_id
    stop = set(ids if isinstance(ids, list) else [ids] if ids is not None else [])
    if tokenizer.eos_token_id is not None:
        stop.add(int(tokenizer.eos_token_id))
    return stop


def _sampling_key(request: ChatRequest) -> tuple[float, float, float]:
    penalty = request.repetition_penalty
    return (0.0, 1.0, penalty) if request.temperature <= 0 else (request.temperature, request.top_p, penalty)


def _without_lengths_beside_patterns(schema: Any) -> Any:
    """The schema less minLength/maxLength where a pattern stands beside them: xgrammar ignores them there and
    says so on stderr at every compile (the action schema's worded argument; see ``CLOSE_RESERVE``)."""
    if isinstance(schema, list):
        return [_without_lengths_beside_patterns(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    patterned = "pattern" in schema
    return {
        k: _without_lengths_beside_patterns(v)
        for k, v in schema.items()
        if not (patterned and k in ("minLength", "maxLength"))
    }


def _ebnf_literal(text: str) -> str:
    """``text`` as an EBNF string literal (xgrammar's escapes are JSON's)."""
    return json.dumps(text, ensure_ascii=False)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
