#!/usr/bin/env bash
# The GPU smoke test: about 5 minutes on one CUDA GPU, one prepared script for a lent GPU machine.
#
#   bash benchmarks/gpu_smoke.sh [OUT]        # from the repository root; OUT defaults to $OUT, else ./gpu-smoke
#
# 1. Generation: whole 6-turn episodes of the embedded SmolLM2-135M on the GPU (local backend, bf16, the prefix
#    cache on), 1, 8 and 64 at once against 4 one after another (benchmarks/local_batching.py).
# 2. Training in bf16: a BC LoRA (one epoch of the expert's verifiable demonstrations), 2 episode-GRPO steps
#    from it, each evaluated greedily on verifiable:test (benchmarks/episode_rl.py: stage time, peak GPU memory).
# 3. The policy server with a real vLLM (training/policy_server.py), when `import vllm` works here: the BC
#    policy served with its LoRA, 36 episodes played through it. Skipped, with a line saying so, otherwise.
#
# Each part's table goes to OUT/*.txt as well as to the screen; a failing part does not stop the next.
set -uo pipefail
OUT=${1:-${OUT:-gpu-smoke}}
mkdir -p "$OUT"
cd "$(dirname "$0")" || exit 1
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
case "$OUT" in /*) ;; *) OUT="$OLDPWD/$OUT" ;; esac

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee "$OUT/gpu.txt"
python -c "import torch; assert torch.cuda.is_available(), 'CUDA is not available'; print('torch', torch.__version__, torch.cuda.get_device_name())" || exit 1

run generation python local_batching.py --device cuda --modes episodes --concurrency 1 8 64 --sequential 4 \
  --episode-turns 6
run training python episode_rl.py --keep "$OUT/rl" --rows bc,grpo --k 0 --bc-epochs 1 --steps 2 --threads 8
if python -c "import vllm" 2>/dev/null; then
  run vllm python gpu_vllm_policy.py "$OUT/rl/bc" "$OUT/vllm.log"
else
  echo "== vllm: not installed here (pip install vllm); the policy server part is skipped" | tee "$OUT/vllm.txt"
fi
exit $status
