#!/bin/bash
# Builds the gpu preset (CUDA on, no FFmpeg, tests that find the sources from the repository
# root) and packs what scripts/gpu_check.sh runs on the GPU machine into
# build/gpu-pack/mmrt-gpu.tar.xz, a path git ignores: name it in the device call's `carry`.
# usage: scripts/gpu_pack.sh            (from the repository root; incremental, uses ccache)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset gpu > /dev/null
cmake --build --preset gpu -j"$(nproc)"
b=build/gpu
exes=("$b/tools/mmrt" "$b/tests/ops/test_ops" "$b/tests/ops/test_ops_ref"
  "$b/tests/linear/test_linear" "$b/tests/linear/test_linear_ref" "$b/tests/models/test_models"
  "$b/tests/models/test_models_ref" "$b/tests/engine_model/test_engine_model" "$b/bench/bench_ops"
  "$b/bench/bench_linear")
scripts/gpu/pack.sh build/gpu-pack/mmrt-gpu.tar.xz "${exes[@]}"
size=$(stat -c %s build/gpu-pack/mmrt-gpu.tar.xz)
# A device call carries 64 MiB in all, the working tree included.
if ((size > 48 * 1024 * 1024)); then
  echo "gpu_pack: the pack is $((size >> 20)) MiB; leave room for the working tree (64 MiB)" >&2
  exit 1
fi
git rev-parse HEAD > build/gpu-pack/REVISION
git diff --quiet HEAD || echo "dirty" >> build/gpu-pack/REVISION
echo "revision $(paste -sd' ' build/gpu-pack/REVISION)"
