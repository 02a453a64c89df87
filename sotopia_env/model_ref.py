"""A trained model directory: ``sotopia_model.json`` names its base model spec and its adapter.

Training writes it (``write_model_ref``); the local backend reads it (``read_model_ref``), so a stage's output
directory is a model spec like any other (``sotopia-env run --agent1 runs/x/bc``).
"""

from __future__ import annotations

import json
from pathlib import Path

MODEL_REF = "sotopia_model.json"  # {"base": <model spec>, "adapter": <dir, relative to this file's folder>}


def write_model_ref(directory: Path, base: str, adapter: str) -> None:
    """``sotopia_model.json``: the base model spec (a path made absolute) and the adapter, relative to it."""
    base_path = Path(base).expanduser()
    base_spec = str(base_path.resolve()) if base_path.is_dir() else base
    (directory / MODEL_REF).write_text(json.dumps({"base": base_spec, "adapter": adapter}, indent=2) + "\n")


def read_model_ref(spec: str | Path, adapter: str | None = None) -> tuple[str, str | None]:
    """``(base spec, adapter dir)``: a dir with ``sotopia_model.json`` names both (the adapter relative to it)."""
    ref = Path(spec).expanduser() / MODEL_REF
    if not ref.is_file():
        return str(spec), adapter
    data = json.loads(ref.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("base"), str):
        raise ValueError(f"{ref}: expected {{'base': <model spec>, 'adapter': <dir>}}")
    found = data.get("adapter")
    if found and adapter:
        raise ValueError(f"{ref} already names an adapter; do not pass adapter= as well")
    if found:
        path = Path(found).expanduser()
        adapter = str(path if path.is_absolute() else (ref.parent / path).resolve())
    return data["base"], adapter
