"""The pipeline under ``accelerate launch``, for ``test_accelerate_launch.py``: every rank runs this script.

    accelerate launch --multi_gpu --num_processes 2 tests/accelerate_pipeline.py CONFIG.yaml REPORT_DIR

Runs every stage of CONFIG (``training.pipeline.run_stages``) and leaves in REPORT_DIR, per rank:

- ``weights-STAGE-rankN.txt``: a hash of that rank's trainable weights at the end of each trained stage
  (taken where the stage saves its model, before only the main process writes it);
- ``played-rankN.txt``: one line per episode batch this rank played (only the main process should play).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import sotopia_env.episodes.runner as runner
import sotopia_env.training.context as context
import sotopia_env.training.grpo as grpo
import sotopia_env.training.sft as sft_module
from sotopia_env.training.config import load_config
from sotopia_env.training.distributed import process_index
from sotopia_env.training.pipeline import run_stages


def weights_hash(model) -> str:
    digest = hashlib.sha256()
    for name, param in sorted(model.named_parameters()):
        if param.requires_grad:
            digest.update(name.encode())
            digest.update(param.detach().float().cpu().numpy().tobytes())
    return digest.hexdigest()


def main() -> None:
    config_path, report = sys.argv[1], Path(sys.argv[2])
    rank = process_index()
    save = sft_module.save_adapter_spec

    def hashing_save(trainer, out: Path, *args) -> None:
        (report / f"weights-{out.name}-rank{rank}.txt").write_text(weights_hash(trainer.model))
        save(trainer, out, *args)

    async def recording_batch(jobs, store, tag, *args, **kwargs):
        with open(report / f"played-rank{rank}.txt", "a") as f:
            f.write(f"{tag} {len(jobs)}\n")
        return await runner.run_batch(jobs, store, tag, *args, **kwargs)

    sft_module.save_adapter_spec = grpo.save_adapter_spec = hashing_save
    context.run_batch = recording_batch
    run_stages(load_config(config_path), progress=False)


if __name__ == "__main__":
    main()
