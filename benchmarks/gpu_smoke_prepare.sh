#!/usr/bin/env bash
# Prepare what travels to a lent GPU machine for benchmarks/gpu_smoke.sh (see benchmarks/GPU_RUN.md): run HERE, from the
# repository root, with network to PyPI. It fills .gpu-smoke/ (git-ignored, about 15 MB):
#   .gpu-smoke/whl/    Python 3.12 x86-64 wheels of what the smoke path imports and that machine lacks, and ours
#   .gpu-smoke/shape/  SmolLM2-135M's config and tokenizer files (no weights: the smoke test makes random ones)
# The versions are pinned to what this project is tested with; one version of each (two stop the install there).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -rf .gpu-smoke && mkdir -p .gpu-smoke/whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .gpu-smoke/whl \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0 \
  gymnasium==1.4.0 farama-notifications==0.0.6 pettingzoo==1.27.0 json-repair==0.64.6 \
  xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 trl==1.16.0
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w .gpu-smoke/whl .  # sotopia-env itself
"$PY" benchmarks/gpu_smoke.py --prepare .gpu-smoke/shape
du -sh .gpu-smoke
