#!/usr/bin/env bash
# The GPU smoke test: one prepared script for a lent GPU machine (benchmarks/GPU_RUN.md has the exact `run` call).
#
#   bash benchmarks/gpu_smoke.sh [OUT]        # from the repository root; OUT defaults to $OUT, else ./gpu-smoke
#
# 1. Always (benchmarks/gpu_smoke.py, one table: step time, tokens/s, peak GPU memory, the model's device and
#    dtype): generation through the local backend, 2 steps of our episode GRPO, 2 steps of TRL's GRPOTrainer with
#    our worlds as its environment_factory. The model is SmolLM2-135M's architecture with RANDOM weights built
#    there from .gpu-smoke/shape (benchmarks/gpu_smoke_prepare.sh): no hub needed. SMOKE_STAGE_TIMEOUT seconds
#    per stage (default 150); a stage that fails or hangs leaves the others' rows.
# 2. Only where the embedded model is already cached (not on a bare lent machine): whole 6-turn episodes of the
#    real SmolLM2-135M at 1, 8 and 64 at once (local_batching.py), a BC LoRA and 2 episode-GRPO steps from it
#    evaluated greedily (episode_rl.py), and the BC policy served by a real vLLM when `import vllm` works.
#
# Each part's output goes to OUT/*.txt as well as to the screen; a failing part does not stop the next.
set -uo pipefail
OUT=${1:-${OUT:-gpu-smoke}}
PY=${PYTHON:-python3}
mkdir -p "$OUT"
case "$OUT" in /*) ;; *) OUT="$PWD/$OUT" ;; esac
cd "$(dirname "$0")/.." || exit 1
status=0
run() {  # run NAME CMD...: the command's output to the screen and OUT/NAME.txt, its time, its failure noted
  local name=$1; shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" 2>&1 | tee "$OUT/$name.txt"
  local rc=${PIPESTATUS[0]}
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  [ "$rc" -eq 0 ] || status=1
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$OUT/gpu.txt"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'CUDA is not available'; print('torch', torch.__version__, torch.cuda.get_device_name())" || exit 1

run smoke "$PY" benchmarks/gpu_smoke.py --shape .gpu-smoke/shape --out "$OUT" --work "${SMOKE_WORK:-/tmp/gpu-smoke-work}" \
  --stage-timeout "${SMOKE_STAGE_TIMEOUT:-150}"

if "$PY" -P -c "import sys; from sotopia_env.embedded_models import is_cached; sys.exit(not is_cached('smollm2-135m'))" 2>/dev/null; then
  cd benchmarks || exit 1
  run generation "$PY" local_batching.py --device cuda --modes episodes --concurrency 1 8 64 --sequential 4 \
    --episode-turns 6
  run training "$PY" episode_rl.py --keep "$OUT/rl" --rows bc,grpo --k 0 --bc-epochs 1 --steps 2 --threads 8
  if "$PY" -c "import vllm" 2>/dev/null; then
    run vllm "$PY" gpu_vllm_policy.py "$OUT/rl/bc" "$OUT/vllm.log"
  else
    echo "== vllm: not installed here (pip install vllm); the policy server part is skipped" | tee "$OUT/vllm.txt"
  fi
else
  echo "== the embedded model is not cached here: part 2 (real weights, vLLM) is skipped"
fi
exit $status
