"""Episode batches on Ray actors: ``run_batch`` sharded over a local or remote Ray cluster.

Ray is optional (``pip install 'sotopia-env[ray]'``). ``run_batch_on_ray`` plans the batch against the store
(resume by combo key), deals the jobs still to run round-robin into one shard per worker, and gives each shard to a
Ray actor. Each actor builds its own backends from a ``BatchRecipe`` (a ``LocalBackend`` on the GPU Ray gave it
with ``gpus_per_worker``, or HTTP clients for ``api_base`` servers), opens the shared store itself, and runs its
shard through the same ``episodes.runner.run_batch`` (so every episode goes through ``run_episode``).

Workers that die are survived twice over:

- a worker process that crashes (SIGKILL, out of memory) is restarted by Ray (``max_restarts``) and its shard
  call retried (``max_task_retries``);
- an actor that is gone for good (``ray.kill``, restarts used up) has its shard given to a new actor.

Either way the shard is planned again against the store, so what was stored is skipped and every episode is stored
exactly once. The driver drains each actor's finished combo keys into one progress bar.

Several machines need a store they all reach (Redis): SQLite is refused unless the cluster is this machine alone.
With ``RayConfig.pin_endpoints`` each actor resolves its backends inside ``endpoints.endpoint_share``, so it calls
only its own share of an ``api_base`` of several servers (one vLLM replica per machine, say).
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sotopia_env.backends.endpoints import endpoint_share
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.runner import AgentFactory, BatchSummary, Job, plan, run_batch
from sotopia_env.episodes.store import EpisodeStore, open_store
from sotopia_env.episodes.store_writer import DEFAULT_RETRY_SECONDS
from sotopia_env.errors import UserError, first_line
from sotopia_env.evaluators import Evaluator
from sotopia_env.limits import DEFAULT_CONCURRENCY

WORKER_PREFIX = "sotopia-env-worker"
MAX_SHARD_RESTARTS = 3  # new actors per shard after its actor is gone for good; Ray's own restarts come first
_POLL_SECONDS = 0.5


class RayError(UserError, RuntimeError):
    """Ray is not installed, the cluster cannot be reached, or a shard's workers kept dying; the message says which."""


class RayStoreError(RayError):
    """A store that the cluster's machines cannot share (SQLite on a cluster of several machines)."""


@dataclass
class RayConfig:
    """Where the workers run. ``address``: None or ``local`` starts a local cluster (or uses the one this process
    already started); ``auto`` joins the cluster ``ray start --head`` runs here; ``HOST:PORT`` or
    ``ray://HOST:10001`` joins a remote one. ``num_workers`` actors share the batch; each reserves
    ``gpus_per_worker`` GPUs (1: a ``LocalBackend`` per GPU). ``pin_endpoints``: each actor calls only its own
    share of an ``api_base`` of several servers (``endpoints.share_of``: its own slice, or one server each when
    there are more actors than servers) instead of spreading over all of them."""

    address: str | None = None
    num_workers: int = 2
    gpus_per_worker: float = 0.0
    pin_endpoints: bool = False

    @property
    def local(self) -> bool:
        return self.address in (None, "", "local")


@dataclass
class BatchRecipe:
    """What every actor builds its own batch from. ``make_agents`` and ``make_evaluator`` are called inside the
    actor (picklable: module-level functions or ``functools.partial`` of them), so models load where they run."""

    store_url: str
    tag: str
    make_agents: Callable[[], AgentFactory]
    make_evaluator: Callable[[], Evaluator | None]
    concurrency: int = DEFAULT_CONCURRENCY  # episodes in flight over all workers together
    config: EnvConfig | None = None
    rerun_failed: bool = False
    retry_seconds: float = DEFAULT_RETRY_SECONDS
    spill_dir: Path | None = None
    max_calls: int | None = None  # calls at once per model in each worker; None: what its episodes in flight need


@dataclass
class ShardResult:
    finished: list[tuple[str, str | None]] = field(default_factory=list)  # (combo key, episode id or None if skipped)
    error: str | None = None  # a store or setup error, one line


class ShardWorker:
    """A Ray actor's body: runs shards of one batch with backends it built itself."""

    def __init__(self, recipe: BatchRecipe, concurrency: int, share: tuple[int, int] | None = None) -> None:
        self.recipe = recipe
        self.concurrency = concurrency
        self.share = share  # (worker index, worker count): this actor's share of the servers; None: all of them
        self.finished: list[tuple[str, str | None]] = []
        self._built: tuple[EpisodeStore, AgentFactory, Evaluator | None] | None = None

    async def pid(self) -> int:
        return os.getpid()

    async def drain(self) -> list[tuple[str, str | None]]:
        """The combos finished since the last drain (played, or found stored already)."""
        out, self.finished = self.finished, []
        return out

    def _build(self) -> tuple[EpisodeStore, AgentFactory, Evaluator | None]:
        if self._built is None:
            from sotopia_env.episodes.gc_tuning import tune_gc_for_batch

            r = self.recipe
            self._built = (open_store(r.store_url), r.make_agents(), r.make_evaluator())
            tune_gc_for_batch()  # as the CLI does before a long batch
        return self._built

    async def run(self, jobs: list[Job]) -> ShardResult:
        share = endpoint_share(*self.share) if self.share else contextlib.nullcontext()
        with share:  # the backends this actor resolves, and their servers, are its own
            return await self._run(jobs)

    async def _run(self, jobs: list[Job]) -> ShardResult:
        r = self.recipe
        try:
            store, agents, evaluator = self._build()
            todo, _ = plan(jobs, store, r.tag, r.rerun_failed)
            todo_keys = {j.key for j in todo}
            self.finished.extend((j.key, None) for j in jobs if j.key not in todo_keys)
            await run_batch(
                todo,
                store,
                r.tag,
                evaluator,
                agents,
                self.concurrency,
                r.config,
                r.rerun_failed,
                progress=False,
                retry_seconds=r.retry_seconds,
                spill_dir=r.spill_dir,
                max_calls=r.max_calls,
                on_episode=lambda log: self.finished.append((log.combo_key, log.id)),
            )
        except (UserError, ValueError, OSError) as exc:  # StoreError (spilled episodes included), a bad spec
            return ShardResult(await self.drain(), f"{type(exc).__name__}: {exc}")
        return ShardResult(await self.drain())


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayError("--ray needs Ray: pip install 'sotopia-env[ray]'") from None
    return ray


def import_path() -> str:
    """The driver's own import folders (the working tree, --agents-path folders, the current folder) as a
    PYTHONPATH for the workers; installed packages come from the workers' own environment (a site-packages folder
    is never passed on, even one outside this environment's prefix: ahead of the workers' own, its editable
    finders would import another checkout's code)."""
    skip = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    folders = []
    for entry in sys.path:
        path = os.path.realpath(entry or os.getcwd())
        installed = any(part in ("site-packages", "dist-packages") for part in path.split(os.sep))
        if os.path.isdir(path) and not installed and not any(path == s or path.startswith(s + os.sep) for s in skip):
            folders.append(path)
    return os.pathsep.join(dict.fromkeys(folders))


def _check_reachable(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that refuses connections is one line now, not minutes of Ray's retries."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # 'auto' and the like: Ray resolves them
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise RayError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


def connect(ray_config: RayConfig) -> Any:
    """Ray, initialised once per process: a local cluster, or the one at ``ray_config.address``."""
    ray = _import_ray()
    if not ray.is_initialized():
        address = None if ray_config.local else ray_config.address
        if address:
            _check_reachable(address)
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            where = address or "a new local cluster"
            raise RayError(f"cannot reach the Ray cluster at {where}: {first_line(exc)}") from None
    return ray


def check_store(ray: Any, store_url: str, ray_config: RayConfig) -> None:
    """SQLite lives on one machine: refuse it for a cluster of several (or one reached through ray://)."""
    if store_url.startswith(("redis://", "rediss://", "unix://")):
        return
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    remote = (ray_config.address or "").startswith("ray://")
    if len(nodes) > 1 or remote:
        where = f"{len(nodes)} machines" if len(nodes) > 1 else f"the remote cluster {ray_config.address}"
        raise RayStoreError(
            f"--store {store_url}: an SQLite file cannot be shared by {where}; use a Redis store (redis://HOST:6379/0)"
        )


def check_resources(ray: Any, ray_config: RayConfig) -> None:
    """Every worker reserves a CPU (and its GPUs): more workers than the cluster holds would wait forever."""
    have = ray.cluster_resources()
    cpus, gpus = have.get("CPU", 0), have.get("GPU", 0)
    need_gpus = ray_config.num_workers * ray_config.gpus_per_worker
    if ray_config.num_workers > cpus or need_gpus > gpus:
        raise RayError(
            f"{ray_config.num_workers} Ray workers need {ray_config.num_workers} CPUs and {need_gpus:g} GPUs; "
            f"the cluster has {cpus:g} CPUs and {gpus:g} GPUs (lower --ray-workers or --ray-gpus-per-worker)"
        )


class _Driver:
    """Hands shards to actors, replaces actors that are gone, and drains their progress."""

    def __init__(self, ray: Any, recipe: BatchRecipe, ray_config: RayConfig, shards: list[list[Job]]) -> None:
        self.ray = ray
        self.recipe = recipe
        self.shards = shards
        per_worker = max(1, math.ceil(recipe.concurrency / len(shards)))
        self.worker = ray.remote(ShardWorker)
        self.options = {
            "num_cpus": 1,
            "scheduling_strategy": "SPREAD",  # over the cluster's machines, not packed onto the head
            "num_gpus": ray_config.gpus_per_worker,
            "max_restarts": 2,  # a crashed worker process: Ray restarts the actor and retries its shard call
            "max_task_retries": 2,
            "runtime_env": {"env_vars": {"PYTHONPATH": import_path()}},
        }
        self.per_worker = per_worker
        self.pin = ray_config.pin_endpoints
        self.batch_id = uuid.uuid4().hex[:8]
        self.actors: dict[int, Any] = {}
        self.replaced = [0] * len(shards)
        self.running: dict[Any, int] = {}  # run ref -> shard
        self.draining: dict[int, Any] = {}  # shard -> outstanding drain ref
        self.finished: dict[str, str | None] = {}
        self.errors: list[str] = []

    def start(self, shard: int) -> None:
        name = f"{WORKER_PREFIX}-{self.batch_id}-{shard}-{self.replaced[shard]}"
        share = (shard, len(self.shards)) if self.pin else None
        actor = self.worker.options(name=name, **self.options).remote(self.recipe, self.per_worker, share)
        self.actors[shard] = actor
        self.draining.pop(shard, None)
        self.running[actor.run.remote(self.shards[shard])] = shard

    def _record(self, pairs: list[tuple[str, str | None]]) -> None:
        for key, episode_id in pairs:
            if episode_id or key not in self.finished:
                self.finished[key] = episode_id

    def poll(self) -> None:
        """Collect the drains that answered; ask the actors without one outstanding for the next."""
        ray = self.ray
        for shard, ref in list(self.draining.items()):
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                del self.draining[shard]
                try:
                    self._record(ray.get(ref))
                except ray.exceptions.RayError:
                    pass  # the actor died; its shard is replanned against the store
        for shard in set(self.running.values()) - set(self.draining):
            self.draining[shard] = self.actors[shard].drain.remote()

    def settle(self, ref: Any) -> None:
        """A shard's run answered: record it, or give the shard to a new actor if its actor is gone."""
        ray = self.ray
        shard = self.running.pop(ref)
        try:
            result: ShardResult = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            self.replaced[shard] += 1
            if self.replaced[shard] > MAX_SHARD_RESTARTS:
                raise RayError(
                    f"shard {shard} of batch {self.recipe.tag!r}: its worker died {self.replaced[shard]} times; "
                    f"last: {first_line(exc)}"
                ) from None
            self.start(shard)
            return
        self._record(result.finished)
        if result.error:
            self.errors.append(result.error)

    def run(self, bar: Callable[[int], None]) -> None:
        ray = self.ray
        try:
            for shard in range(len(self.shards)):
                self.start(shard)
            while self.running:
                ready, _ = ray.wait(list(self.running), num_returns=1, timeout=_POLL_SECONDS)
                for ref in ready:
                    self.settle(ref)
                self.poll()
                bar(len(self.finished))
        finally:
            for actor in self.actors.values():
                ray.kill(actor)


def run_batch_on_ray(
    jobs: Sequence[Job],
    store: EpisodeStore,
    recipe: BatchRecipe,
    ray_config: RayConfig,
    progress: bool = True,
) -> BatchSummary:
    """``run_batch`` over ``ray_config.num_workers`` Ray actors writing to one store (``recipe.store_url``, the
    store that ``store`` opened). Counts come from the store at the end, so a worker that died mid-shard costs
    nothing: its stored episodes are counted once and the rest were played by its replacement."""
    import time

    from sotopia_env.episodes.progress import progress_bar

    ray = connect(ray_config)
    check_store(ray, recipe.store_url, ray_config)
    check_resources(ray, ray_config)
    started = time.perf_counter()  # the batch's time, as run_batch's: not the cluster's start (once per process)
    todo, skipped = plan(jobs, store, recipe.tag, recipe.rerun_failed)
    summary = BatchSummary(total=len(jobs), skipped=skipped)
    shards = [todo[i :: ray_config.num_workers] for i in range(max(1, ray_config.num_workers))]
    shards = [s for s in shards if s]
    if shards:
        driver = _Driver(ray, recipe, ray_config, shards)
        with progress_bar(f"episodes [{recipe.tag}] on {len(shards)} Ray workers", len(todo), progress) as bar:
            driver.run(bar)
        if driver.errors:  # every shard ran to its end first: what could be stored is stored (or spilled)
            raise RayError("; ".join(dict.fromkeys(driver.errors)))
        status = store.combo_status(recipe.tag)
        for job in todo:
            state = status.get(job.key)
            if state in ("rated", "unrated", "failed"):
                setattr(summary, state, getattr(summary, state) + 1)
        summary.episode_ids = [i for i in driver.finished.values() if i]
    summary.wall_seconds = round(time.perf_counter() - started, 3)
    return summary
