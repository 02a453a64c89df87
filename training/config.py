"""The pipeline's one YAML config: dataclasses, validated with one-line errors naming file and field.

A config looks like ``examples/pipeline-cpu.yaml``. Every section is optional
except ``output_dir``; unknown keys are errors. Paths are relative to the
working directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict

from sotopia_env.backends.endpoints import ModelServers
from sotopia_env.env import EnvConfig
from sotopia_env.episodes.job_fields import DEFAULT_CONCURRENCY, DEFAULT_RETRY_SECONDS
from sotopia_env.episodes.ray_batch import RayConfig
from sotopia_env.episodes.store import StoreURLError, store_kind
from sotopia_env.errors import UserError
from sotopia_env.training.base_config import BaseTrainConfig
from sotopia_env.training.dataset import FilterConfig
from sotopia_env.training.policy_server import PolicyServerConfig, template_problem
from sotopia_env.training.sft import SFTTrainConfig
from sotopia_env.training.trainers import all_task_names, trainer_for_task, trainers
from sotopia_env.validation import field_problem

_SET_BY_PIPELINE = ("base_model", "output_dir", "init_adapter")
RLConfig = BaseTrainConfig  # the config of a registered trainer (training.trainers), chosen by its ``task``


class ConfigError(UserError, ValueError):
    """A pipeline config that cannot be used; the message names the file and the field."""


@dataclass
class GenerationConfig:
    """Sampling of every model-driven agent in the pipeline's episodes."""

    temperature: float = 0.7
    max_new_tokens: int = 200


@dataclass
class EvaluatorConfig:
    model: str = "rule-based"  # 'rule-based' (offline, for smoke runs) or a model spec for the LLM judge
    dimensions: str = "sotopia"  # 'sotopia', 'goal' or a comma list of SOTOPIA dimensions


@dataclass
class EpisodeSource:
    """Expert episodes that already exist: a ``tag`` in the pipeline's store, or a file (``path``) in our JSONL
    (``format: jsonl``) or either SOTOPIA layout (``format: sotopia``, as ``episodes import`` reads it)."""

    tag: str | None = None
    path: str | None = None
    format: Literal["jsonl", "sotopia"] | None = None  # with path; default jsonl


@dataclass
class BCConfig:
    """Behaviour cloning: the expert plays itself on ``scenarios`` (or ``partner``, when given: then only the
    expert's seats are trained on); the best episodes are trained on. With ``source``, the expert episodes come
    from there instead (``expert``, ``partner``, ``scenarios`` and ``episodes_per_scenario`` are then unused)."""

    enabled: bool = True
    expert: str = "gpt-4o"  # any agent spec: a model, an alias, or module:Class
    partner: str | None = (
        None  # e.g. rule-partner on verifiable scenarios, with sotopia_env.training.experts:VerifiableExpert
    )
    scenarios: str = "train"
    episodes_per_scenario: int = 2
    source: EpisodeSource | None = None
    filter: FilterConfig = field(default_factory=FilterConfig)
    train: dict[str, Any] = field(default_factory=dict)  # overrides of the top-level train section


@dataclass
class SRConfig:
    """Self-reinforcement: ``rounds`` times, the policy plays itself, is rated, filtered and trained further."""

    rounds: int = 1
    scenarios: str = "train"
    episodes_per_scenario: int = 2
    filter: FilterConfig = field(default_factory=FilterConfig)
    train: dict[str, Any] = field(default_factory=dict)


@dataclass
class EvalConfig:
    """After every stage the policy plays ``partner`` on held-out scenarios, in both seats."""

    enabled: bool = True
    partner: str = "smollm2-135m"
    scenarios: str = "dev"
    episodes_per_scenario: int = 1


@dataclass
class PipelineConfig:
    __pydantic_config__ = ConfigDict(extra="forbid")  # unknown keys are errors, in every section

    output_dir: str
    base_model: str = "smollm2-135m"
    seed: int = 0
    concurrency: int = DEFAULT_CONCURRENCY
    store: str | None = None  # default: SQLite at OUTPUT_DIR/episodes.db
    store_retry_seconds: float = DEFAULT_RETRY_SECONDS  # retried, then spilled to OUTPUT_DIR/spill-*.jsonl
    api_base: ModelServers | None = None  # one server URL, or several (a list or comma-separated): parsed on load
    max_calls: int | None = None  # cap on calls in flight per model (default: one per episode in flight)
    ray: RayConfig | None = None  # episode stages on Ray actors: {address, num_workers, gpus_per_worker, pin_endpoints}
    scenarios_dir: list[str] = field(default_factory=list)
    env: EnvConfig = field(default_factory=EnvConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    evaluator: EvaluatorConfig = field(default_factory=EvaluatorConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    sr: SRConfig = field(default_factory=SRConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    train: SFTTrainConfig = field(default_factory=SFTTrainConfig)
    rl: RLConfig | None = None  # RL after the last SR round (optional): a registered trainer's config, by its task
    policy_server: PolicyServerConfig | None = None  # serve the policy (vLLM) while it plays; training.policy_server
    source: str = "<config>"  # where it was read from (for error messages)

    @property
    def out(self) -> Path:
        return Path(self.output_dir)

    @property
    def store_url(self) -> str:
        return self.store or f"sqlite:///{(self.out / 'episodes.db').resolve()}"

    def train_config(self, stage: str, overrides: dict[str, Any], **fixed: Any) -> SFTTrainConfig:
        """The top-level train section with a stage's overrides and the fields the pipeline sets."""
        import dataclasses

        try:
            return dataclasses.replace(self.train, **{**overrides, **fixed})
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{self.source}: field '{stage}.train': {exc}") from None


def parse_config(raw: Any, source: str = "<config>") -> PipelineConfig:
    """Validate a config mapping; ``ConfigError`` names ``source`` and the first bad field."""
    from pydantic import TypeAdapter, ValidationError

    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the top level must be a mapping")
    if "source" in raw:
        raise ConfigError(f"{source}: field 'source': Unexpected keyword argument")
    for section in ("train", "rl"):
        for key in _SET_BY_PIPELINE:
            if isinstance(raw.get(section), dict) and key in raw[section]:
                raise ConfigError(
                    f"{source}: field '{section}.{key}': set by the pipeline; use the top-level base_model"
                )
    rl = raw.get("rl")
    try:
        config = TypeAdapter(PipelineConfig).validate_python({**raw, "rl": None, "source": source})
    except ValidationError as exc:
        raise ConfigError(f"{source}: {field_problem(exc, '(top level)')}") from None
    if rl is not None:
        rl = {"seed": config.seed, **rl} if isinstance(rl, dict) else rl  # the pipeline's seed, unless rl sets one
        config.rl = parse_rl_config(rl, source, "rl.")
    for stage, section in (("bc", config.bc.train), ("sr", config.sr.train)):
        for key in section:
            if key in _SET_BY_PIPELINE or key not in SFTTrainConfig.__dataclass_fields__:
                raise ConfigError(f"{source}: field '{stage}.train.{key}': not a train setting")
    _check_values(config)
    return config


def _check_values(c: PipelineConfig) -> None:
    def bad(where: str, why: str) -> ConfigError:
        return ConfigError(f"{c.source}: field '{where}': {why}")

    for where, value in (
        ("bc.episodes_per_scenario", c.bc.episodes_per_scenario),
        ("sr.episodes_per_scenario", c.sr.episodes_per_scenario),
        ("eval.episodes_per_scenario", c.eval.episodes_per_scenario),
        ("concurrency", c.concurrency),
        ("max_calls", 1 if c.max_calls is None else c.max_calls),
        ("generation.max_new_tokens", c.generation.max_new_tokens),
    ):
        if value < 1:
            raise bad(where, f"must be at least 1, not {value}")
    if c.ray is not None and c.ray.num_workers < 1:
        raise bad("ray.num_workers", f"must be at least 1, not {c.ray.num_workers}")
    if c.ray is not None and c.ray.gpus_per_worker < 0:
        raise bad("ray.gpus_per_worker", f"must be 0 or more, not {c.ray.gpus_per_worker}")
    if c.sr.rounds < 0:
        raise bad("sr.rounds", f"must be 0 or more, not {c.sr.rounds}")
    if c.store_retry_seconds < 0:
        raise bad("store_retry_seconds", f"must be 0 or more, not {c.store_retry_seconds}")
    if c.store is not None:
        try:
            store_kind(c.store, "store")
        except StoreURLError as exc:
            raise bad("store", str(exc).removeprefix("store ")) from None
    if not c.output_dir.strip():
        raise bad("output_dir", "must not be empty")
    if c.policy_server is not None and (problem := template_problem(c.policy_server)):
        raise bad(f"policy_server.{problem[0]}", problem[1])
    source = c.bc.source
    if source is not None:
        if (source.tag is None) == (source.path is None):
            raise bad("bc.source", "give either tag (episodes in the store) or path (a file), not both")
        if source.tag is not None and source.format is not None:
            raise bad("bc.source.format", "only for a path; a tag's episodes are in the store already")
        if source.path is not None and not Path(source.path).exists():
            raise bad("bc.source.path", f"{source.path}: no such file or directory")


def load_config(path: str | Path) -> PipelineConfig:
    """Read and validate a YAML pipeline config."""
    from sotopia_env.library import read_yaml

    path = Path(path)
    return parse_config(read_yaml(path, ConfigError), str(path))


def parse_rl_config(raw: Any, source: str, prefix: str = "") -> RLConfig:
    """An RL config: its ``task`` chooses the trainer (``training.trainers``: ``episodes`` is episode GRPO, a text
    task is text GRPO, the default), whose config it is. An unknown task, a key of another trainer, or one that was
    renamed, is a one-line ``ConfigError`` naming it (and its new name)."""
    from pydantic import TypeAdapter, ValidationError

    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: field '{prefix.rstrip('.') or '(top level)'}': must be a mapping")
    task = raw.get("task")
    trainer = trainer_for_task(task) if task is None or isinstance(task, str) else None
    if trainer is None:
        raise ConfigError(
            f"{source}: field '{prefix}task': unknown RL task {task!r} (tasks: {', '.join(all_task_names())})"
        )
    own = trainer.config.__dataclass_fields__
    for key in raw:
        if key in own:
            continue
        if key in trainer.renamed:
            raise ConfigError(f"{source}: field '{prefix}{key}': renamed to '{trainer.renamed[key]}' for task: {task}")
        for other in trainers():
            if key in other.config.__dataclass_fields__:
                tasks = ", ".join(other.task_names())
                raise ConfigError(f"{source}: field '{prefix}{key}': only for {other.title} (task: {tasks})")
    try:
        return TypeAdapter(trainer.config).validate_python(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {field_problem(exc, '(top level)', prefix=prefix)}") from None


def load_rl_config(path: str | Path) -> RLConfig:
    """Read and validate a trainer's YAML config (``sotopia-env train run``): see ``parse_rl_config``."""
    from sotopia_env.library import read_yaml

    return parse_rl_config(read_yaml(Path(path), ConfigError), str(path))
