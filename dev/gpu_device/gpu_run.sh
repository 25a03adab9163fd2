#!/usr/bin/env bash
# On the lent GPU machine: unpack the carried py3.12 packages (vLLM 0.24, verl 0.9.1, Ray, ...), then
# run_scripts/gpu_check.sh with the tiny Qwen3 (two launches, resume, validation, exact IG), verdict
# and coverage. Everything worth reading is copied to $OUT before the call's limit.
# usage (device, repo root, after the chunk calls): bash .gpuc/run/gpu_run.sh
set -uo pipefail
T0=$SECONDS
BUDGET=${BUDGET:-560}
mkdir -p /tmp/c && cp .gpuc/p[0-9]* /tmp/c/ 2>/dev/null
ls -la /tmp/c
if [ ! -d /tmp/site312/vllm ]; then
  cat /tmp/c/p[0-9]* | tar -xz -C /tmp || { echo "unpack failed"; exit 3; }
fi
# packages added after the chunks were cut (e.g. apache-tvm-ffi, which xgrammar imports)
[ -f .gpuc/run/extra.tar.gz ] && tar -xzf .gpuc/run/extra.tar.gz -C /tmp
echo "[gpu_run] unpacked after $((SECONDS - T0)) s"
export PYTHONPATH=/tmp/site312:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHON=python3 PYTHONUNBUFFERED=1
# tvm_ffi would otherwise compile a torch DLPack addon at import (no compiler cache there)
export TVM_FFI_DISABLE_TORCH_C_DLPACK=1
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 RAY_USAGE_STATS_ENABLED=0 WANDB_MODE=disabled
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
python3 - <<'PY' 2>&1 | tee $OUT/versions.txt
import importlib.metadata as md, sys
print(sys.version)
for n in ["torch","vllm","verl","ray","transformers","tokenizers","numpy","pandas","pyarrow","protobuf","grpcio","TransferQueue","tensordict","math-verify","hydra-core","triton"]:
    try: print(n, md.version(n))
    except Exception as e: print(n, "MISSING", e)
import torch; print("cuda", torch.version.cuda, torch.cuda.is_available(), torch.cuda.get_device_name(0))
import vllm, verl, ray, recipe.arise.adapters.main_arise  # the imports a launch needs
from vllm import LLM  # noqa: F401  (lazy in vllm/__init__: pulls in the engine, xgrammar)
import vllm.entrypoints.openai.api_server, vllm.v1.engine.core  # noqa: E401,F401
import recipe.arise.adapters.rollout_adapter, recipe.arise.cpu.vllm_plugin  # noqa: E401,F401
from importlib.metadata import entry_points
plugins = [e.value for e in entry_points(group="vllm.general_plugins")]
assert any(v.startswith("recipe.arise") for v in plugins), f"ARISE's vLLM plugin is not registered: {plugins}"
print("imports ok; vLLM plugins:", plugins)
PY
[ "${PIPESTATUS[0]}" = 0 ] || { echo "[gpu_run] imports failed: stopping before the launch"; exit 4; }
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -l 1 > $OUT/smi.csv 2>&1 &
SMI=$!
export GPUC=$PWD/.gpuc/run CKPT_ROOT=/tmp/gpuc
source .gpuc/run/env.sh
left=$((BUDGET - (SECONDS - T0)))
echo "[gpu_run] gpu_check with ${left} s left"
timeout --kill-after=10 "$left" bash run_scripts/gpu_check.sh 2>&1 | tee $OUT/console.txt
echo "[gpu_run] gpu_check exit ${PIPESTATUS[0]} after $((SECONDS - T0)) s" | tee -a $OUT/console.txt
kill $SMI 2>/dev/null
cp $CKPT_ROOT/metrics*.jsonl $OUT/ 2>/dev/null
for f in $CKPT_ROOT/run*.log; do [ -f "$f" ] && gzip -c "$f" > $OUT/$(basename "$f").gz; done
ls -R $CKPT_ROOT/checkpoints 2>/dev/null | head -50 > $OUT/ckpt_tree.txt
ls -la $OUT
