"""Continuous batching for the local backend: requests join the running batch at the next step and leave it
when they end.

One worker (a thread of the backend's executor) runs while there is work. Each turn of its loop it

1. admits waiting requests, as many as ``max_batch_size`` rows, the KV budget and the prefill budget allow:
   their prompts are looked up in the prefix cache (rows of one admission that share a prefix no entry holds
   have it prefilled once), the cached part is copied into each row's slot and the rest prefilled in one forward
   pass; each prompt's keys/values go to the prefix cache at once, for the requests that follow;
2. drops rows whose caller went away (a cancelled ``generate``);
3. decodes one token for every running row in one forward pass.

A row that ends (a stop token, or its ``max_new_tokens``) is answered at once and its slot freed; a long answer
holds back no one. Keys and values live in ``slot_cache.SlotCache``: written in place, never copied whole per
step, within ``kv_cache_mb`` (a request is admitted when its row fits; one row is always admitted).

Every row keeps its own logits processors, built as the ``generate`` path builds them for a batch of one (its
grammar matcher and closing steer, no-copy and opening guard, repetition penalty, warpers, recorders and its
own seeded generator), fed the row's own prompt and reply. So a greedy reply is the one-at-a-time reply, and a
seeded sample does not depend on what else was running, up to the float noise of batched arithmetic.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LogitsProcessorList

from sotopia_env.backends import prefix_cache, slot_cache
from sotopia_env.backends.base import ChatRequest, Completion, describe

PREFILL_TOKENS = 8192  # new prompt tokens one admission prefills at most (one row always goes)
PADDING_SLACK = 1.25  # a prefill forward runs at most this many token slots per new prompt token
CPU_GROUP_TOKENS = 512  # on a CPU, rows are prefilled together only up to this many new tokens (no gain beyond)


@dataclass
class Plan:
    """What rows decode with: their logits processors, the two recorders among them (``backends/local.py``:
    the policy's and the sampler's log-probabilities), and the settings ``generate`` itself is given."""

    processors: LogitsProcessorList
    policy: Any  # a recorder of the unconstrained policy's log-probabilities (raw logits / temperature), or None
    sampler: Any  # a recorder of those of the distribution each token was drawn from, or None
    sampling: dict[str, Any]


@dataclass
class Waiting:
    """A request and where its answer goes: an asyncio future of ``loop``'s, or (``loop`` None) a thread's."""

    request: ChatRequest
    future: asyncio.Future[Completion] | concurrent.futures.Future[Completion]
    loop: asyncio.AbstractEventLoop | None = None

    def gone(self) -> bool:
        return self.future.done()  # cancelled by its caller (or answered)

    def answer(self, completion: Completion) -> None:
        def settle() -> None:
            if not self.future.done():
                self.future.set_result(completion)

        if self.loop is None:
            settle()
            return
        try:
            self.loop.call_soon_threadsafe(settle)
        except RuntimeError:  # the caller's event loop has closed: nobody is waiting
            pass


@dataclass
class _Row:
    waiting: Waiting
    prompt: torch.Tensor  # 1-D prompt ids
    plan: Plan
    constrained: bool
    ids: torch.Tensor  # [1, prompt + max_new_tokens]: the prompt, then the reply so far
    hit: prefix_cache.Hit
    started: float = field(default_factory=time.perf_counter)
    generated: int = 0  # reply tokens chosen so far (the last is fed at the next step)
    peak_rows: int = 1  # the most rows that ran beside it (``meta["batch_size"]``)

    @property
    def request(self) -> ChatRequest:
        return self.waiting.request

    @property
    def cached(self) -> int:
        """Tokens whose keys/values are in the row's slot: the prompt and every reply token but the last."""
        return len(self.prompt) + max(self.generated - 1, 0)

    @property
    def columns(self) -> int:
        return len(self.prompt) + self.request.max_new_tokens


class Scheduler:
    """The continuous-batching loop of one ``LocalBackend`` (see the module docstring)."""

    def __init__(self, backend: Any, kv_cache_mb: int) -> None:  # the LocalBackend it serves
        self.backend = backend
        self.kv_budget = kv_cache_mb << 20
        config = backend.lm.config.get_text_config()
        heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        dtype = next(backend.lm.parameters()).dtype
        bytes_per_token = 2 * config.num_hidden_layers * heads * head_dim * torch.finfo(dtype).bits // 8
        self.cache = slot_cache.SlotCache(config.num_hidden_layers, bytes_per_token, backend.device)
        self.rows: list[_Row] = []  # row i holds slot i
        self._inbox: list[Waiting] = []
        self._inbox_lock = threading.Lock()
        self._running = False

    def submit(self, items: list[Waiting]) -> bool:
        """Queue ``items``; True when the caller must start the worker (``run``), none being at work."""
        with self._inbox_lock:
            self._inbox.extend(items)
            start, self._running = not self._running, True
        return start

    def run(self) -> None:
        """The worker: runs until no request waits or runs. Every failure becomes failed completions."""
        time.sleep(self.backend.batch_window_s)  # let the requests made together arrive together
        with self.backend._lock, torch.inference_mode():
            while True:
                try:
                    self._admit()
                    self._drop_gone()
                    if self.rows:
                        self._decode()
                except Exception as exc:
                    self._fail_all(exc)
                if self.rows:
                    continue
                with self._inbox_lock:
                    if not self._inbox:
                        self._running = False
                        self.cache.release()
                        return

    # -- admission ---------------------------------------------------------------------------------------------

    def _admit(self) -> None:
        """Admit what waits, as room allows. A failure answers every request taken (none is left hanging)."""
        with self._inbox_lock:
            free = self.backend.max_batch_size - len(self.rows)
            taken, self._inbox = self._inbox[:free], self._inbox[free:]
        taken = [w for w in taken if not w.gone()]
        if not taken:
            return
        try:
            self._admit_taken(taken)
        except Exception as exc:
            with self._inbox_lock:
                waiting_again = {id(w) for w in self._inbox}
            for waiting in taken:
                if id(waiting) not in waiting_again:
                    waiting.answer(Completion(text="", error=f"local generation failed: {describe(exc)}"))
            raise

    def _admit_taken(self, taken: list[Waiting]) -> None:
        backend = self.backend
        if backend._closed:
            for waiting in taken:
                waiting.answer(Completion(text="", error="local backend is closed"))
            return
        backend.stats.requests += len(taken)
        ready: list[tuple[Waiting, torch.Tensor, Any]] = []
        for waiting in taken:
            try:
                prompt, grammar = backend._validated(waiting.request)
            except Exception as exc:
                waiting.answer(Completion(text="", error=f"bad request: {describe(exc)}"))
                continue
            ids = backend.tokenizer(prompt, add_special_tokens=False)["input_ids"]
            ready.append((waiting, torch.tensor(ids, dtype=torch.long), grammar))
        if not ready:
            return
        hits = backend._hits([tokens for _, tokens, _ in ready])
        joining: list[_Row] = []
        columns = max([self.cache.capacity, *(row.columns for row in self.rows)])
        prefill = longest_hit = most_new = 0
        for k, ((waiting, tokens, grammar), hit) in enumerate(zip(ready, hits, strict=True)):
            new = len(tokens) - hit.length
            longest_hit, most_new = max(longest_hit, hit.length), max(most_new, new)
            # the prefill lays every joining row out in (longest hit + most new tokens) columns
            need = max(columns, len(tokens) + waiting.request.max_new_tokens, longest_hit + most_new)
            slots = max(self.cache.slots, len(self.rows) + len(joining) + 1)
            fits = self.cache.bytes_for(slots, need) <= self.kv_budget
            if (self.rows or joining) and (not fits or prefill + new > PREFILL_TOKENS):
                with self._inbox_lock:  # they wait for room; their requests are counted again then
                    self._inbox[:0] = [w for w, _, _ in ready[k:]]
                backend.stats.requests -= len(ready) - k
                break
            columns, prefill = need, prefill + new
            joining.append(self._row(waiting, tokens, grammar, hit))
        if joining:
            self._prefill(joining, columns)

    def _row(self, waiting: Waiting, tokens: torch.Tensor, grammar: Any, hit: prefix_cache.Hit) -> _Row:
        request = waiting.request
        ids = torch.zeros(1, len(tokens) + request.max_new_tokens, dtype=torch.long, device=self.backend.device)
        ids[0, : len(tokens)] = tokens
        no_pads = torch.zeros(1, dtype=torch.long, device=self.backend.device)
        plan = self.backend._processors(
            [request], [grammar], [request.max_new_tokens], len(tokens), no_pads, by_generate=False
        )
        return _Row(waiting, tokens, plan, grammar is not None, ids, hit)

    def _prefill(self, joining: list[_Row], columns: int) -> None:
        """Prefill the joining rows, in groups of like length (``prefill_groups``), and choose their first tokens."""
        self.backend.stats.generate_calls += 1
        self.cache.reserve(len(self.rows) + len(joining), columns)
        most = CPU_GROUP_TOKENS if self.backend.device.type == "cpu" else PREFILL_TOKENS
        for group in prefill_groups(joining, most):
            self._prefill_group(group)

    def _prefill_group(self, joining: list[_Row]) -> None:
        """Copy each row's cached prefix into its slot, run the rest of its prompt, choose its first token."""
        backend = self.backend
        start = len(self.rows)
        for k, row in enumerate(joining):
            entry = row.hit.entry
            if entry is not None and row.hit.length:
                self.cache.copy_in(start + k, entry.keys, entry.values, row.hit.length)
        cached = [row.hit.length for row in joining]
        queries = [len(row.prompt) - row.hit.length for row in joining]
        width = max(queries)
        input_ids = torch.full((len(joining), width), int(backend.tokenizer.pad_token_id), dtype=torch.long)
        for k, row in enumerate(joining):
            input_ids[k, width - queries[k] :] = row.prompt[row.hit.length :]
        self.rows.extend(joining)  # from here a failure fails them with the others
        logits = self._forward(start, input_ids, cached, queries)
        if backend._prefix is not None:
            backend.stats.prefix_reused_tokens += sum(cached)
            for k, row in enumerate(joining):
                keys, values = self.cache.read(start + k, len(row.prompt))
                entry = prefix_cache.CachedPrompt(row.prompt, keys, values)
                backend._prefix.add(entry, replaces=prefix_cache.superseded(row.hit))
        self._choose(list(range(start, start + len(joining))), logits)

    # -- decoding ----------------------------------------------------------------------------------------------

    def _decode(self) -> None:
        """One token for every running row."""
        rows = self.rows
        last = torch.tensor([[int(row.ids[0, len(row.prompt) + row.generated - 1])] for row in rows])
        logits = self._forward(0, last, [row.cached for row in rows], [1] * len(rows))
        self.backend.stats.decode_steps += 1
        self._choose(list(range(len(rows))), logits)

    def _forward(self, start: int, input_ids: torch.Tensor, cached: list[int], queries: list[int]) -> torch.Tensor:
        """Run ``input_ids`` (right-aligned per row) for the slots from ``start``; the last position's logits."""
        backend = self.backend
        columns, positions, width = slot_cache.layout(cached, queries)
        self.cache.reserve(start + len(queries), width)
        self.cache.prepare(start, columns, width)
        dtype = next(backend.lm.parameters()).dtype
        mask = slot_cache.mask(cached, queries, width, dtype, backend.device)
        out = backend.lm(
            input_ids=input_ids.to(backend.device),
            attention_mask=mask,
            position_ids=positions.to(backend.device),
            use_cache=True,
            logits_to_keep=1,
            **{backend._cache_kwarg: self.cache},
        )
        stats = backend.stats
        stats.peak_rows = max(stats.peak_rows, start + len(queries))
        stats.kv_peak_bytes = max(stats.kv_peak_bytes, self.cache.nbytes())
        return out.logits[:, -1, :].float()

    def _choose(self, slots: list[int], logits: torch.Tensor) -> None:
        """Each row's next token through its own processors; rows that end are answered and leave."""
        running = len(self.rows)
        ended = []
        for k, slot in enumerate(slots):
            row = self.rows[slot]
            row.peak_rows = max(row.peak_rows, running)
            seen = row.ids[:, : len(row.prompt) + row.generated]
            scores = row.plan.processors(seen, logits[k : k + 1].clone())
            token = int(scores.argmax(dim=-1))
            row.ids[0, len(row.prompt) + row.generated] = token
            row.generated += 1
            if token in self.backend._stop_ids or row.generated >= row.request.max_new_tokens:
                ended.append(slot)
        for slot in sorted(ended, reverse=True):
            row = self.rows[slot]
            row.waiting.answer(self._completion(row))
            self._free(slot)

    def _completion(self, row: _Row) -> Completion:
        backend = self.backend
        sequence = row.ids[:, : len(row.prompt) + row.generated]
        recorded = None
        plan = row.plan
        if plan.policy is not None and row.request.logprobs:
            logprobs = plan.policy.finish(sequence)[0].cpu().tolist()
            chosen = plan.sampler.finish(sequence)[0].cpu().tolist() if plan.sampler is not None else None
            recorded = {
                "prompt_ids": row.prompt.tolist(),
                "logprobs": logprobs,
                "sampler_logprobs": chosen if chosen is not None else [0.0] * len(logprobs),
            }
        return backend._completion(
            sequence[0, len(row.prompt) :].tolist(),
            len(row.prompt),
            constrained=row.constrained,
            latency=time.perf_counter() - row.started,
            batch_size=row.peak_rows,
            recorded=recorded,
        )

    def _drop_gone(self) -> None:
        for slot in range(len(self.rows) - 1, -1, -1):
            if self.rows[slot].waiting.gone():
                self.backend.stats.cancelled += 1
                self._free(slot)

    def _free(self, slot: int) -> None:
        """Row ``slot`` leaves; the last row moves into its slot, so the running rows stay the first slots."""
        last = len(self.rows) - 1
        if slot != last:
            moved = self.rows[last]
            self.cache.move(last, slot, moved.cached)
            self.rows[slot] = moved
        self.rows.pop()

    def _fail_all(self, exc: Exception) -> None:
        backend = self.backend
        backend.stats.failed_batches += 1
        error = f"local generation failed: {describe(exc)}"
        for row in self.rows:
            row.waiting.answer(Completion(text="", error=error, latency_s=time.perf_counter() - row.started))
        self.rows.clear()
        self.cache.release()
        if backend.device.type == "cuda":
            torch.cuda.empty_cache()


def prefill_groups(rows: list[_Row], most_tokens: int) -> list[list[_Row]]:
    """``rows`` in groups to prefill together: by length of the prompt part each has to run, each group padding
    its rows to its longest by at most ``PADDING_SLACK`` and holding at most ``most_tokens`` (one row always
    goes). Prefill is compute-bound on a CPU: a padded slot costs what a real token does, and a batch of long
    prompts runs no faster per token than one prompt, so there a first turn of 450 tokens goes alone."""
    groups: list[list[_Row]] = []
    real = 0
    for row in sorted(rows, key=lambda r: len(r.prompt) - r.hit.length):
        new = len(row.prompt) - row.hit.length
        fits = (len(groups[-1]) + 1) * new <= PADDING_SLACK * (real + new) if groups else False
        if fits and real + new <= most_tokens:
            groups[-1].append(row)
            real += new
        else:
            groups.append([row])
            real = new
    return groups
