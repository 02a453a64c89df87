"""A trained model directory: ``sotopia_model.json`` names its base model spec, its adapter and its prompt.

Training writes it (``write_model_ref``); the local backend reads it (``read_model_ref``), so a stage's output
directory is a model spec like any other (``sotopia-env run --agent1 runs/x/bc``). ``prompt`` is the prompt
(``sotopia_env.prompt.PROMPTS``) the model was trained on, which it is prompted with ever after
(``model_prompt``); a directory written before the prompt was recorded was trained on SOTOPIA's.
"""

from __future__ import annotations

import json
from pathlib import Path

MODEL_REF = "sotopia_model.json"  # {"base": <model spec>, "adapter": <dir, relative to this file's folder>, "prompt"}
UNRECORDED_PROMPT = "sotopia"  # what a model directory that records no prompt was trained on (all before it did)


def write_model_ref(directory: Path, base: str, adapter: str | None, prompt: str) -> None:
    """``sotopia_model.json``: the base model spec (a path made absolute), the adapter relative to it (None: the
    base is the whole model, e.g. a full fine-tune's own directory), and the prompt the model was trained on."""
    base_path = Path(base).expanduser()
    base_spec = str(base_path.resolve()) if base_path.is_dir() else base
    data = {"base": base_spec, "adapter": adapter, "prompt": prompt}
    (directory / MODEL_REF).write_text(json.dumps(data, indent=2) + "\n")


def _read(spec: str | Path) -> tuple[Path, dict] | None:
    ref = Path(spec).expanduser() / MODEL_REF
    if not ref.is_file():
        return None
    data = json.loads(ref.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("base"), str):
        raise ValueError(f"{ref}: expected {{'base': <model spec>, 'adapter': <dir>, 'prompt': <name>}}")
    if not isinstance(data.get("prompt", UNRECORDED_PROMPT), str):
        raise ValueError(f"{ref}: field 'prompt': expected a prompt name, not {data['prompt']!r}")
    return ref, data


def read_model_ref(spec: str | Path, adapter: str | None = None) -> tuple[str, str | None]:
    """``(base spec, adapter dir)``: a dir with ``sotopia_model.json`` names both (the adapter relative to it)."""
    found = _read(spec)
    if found is None:
        return str(spec), adapter
    ref, data = found
    named = data.get("adapter")
    if named and adapter:
        raise ValueError(f"{ref} already names an adapter; do not pass adapter= as well")
    if named:
        path = Path(named).expanduser()
        adapter = str(path if path.is_absolute() else (ref.parent / path).resolve())
    return data["base"], adapter


def model_prompt(spec: str | Path) -> str | None:
    """The prompt a trained model directory was trained on (``UNRECORDED_PROMPT`` where it records none); None
    for a spec that is not a trained model directory."""
    found = _read(spec)
    return None if found is None else str(found[1].get("prompt", UNRECORDED_PROMPT))
