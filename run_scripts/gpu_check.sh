#!/usr/bin/env bash
# The first hour on your GPUs: ARISE with your model, GPUs and settings for ~10 steps, Phase II from
# step 2, in its own checkpoint folder, then a verdict on everything that would make ARISE silently
# plain GRPO (scoring failures, no skill used, a gate that rejects everything, summaries that do not
# parse, no group mixing R=1 and R=2, rollout and actor log-probs that disagree) and on ARISE's
# share of the step time. Each verdict line: metric, value, threshold, OK/WARN/FAIL, what to do.
#
# usage: MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 run_scripts/gpu_check.sh [hydra overrides]
#        (MODEL_PATH=microsoft/Phi-4-mini-instruct: common.sh's Phi-4-mini profile applies, as in training)
#   STEPS=10  PHASE1_STEPS=1  every other variable of run_scripts/common.sh (GPUS_PER_NODE, TRAIN_BATCH,
#   MAX_RESPONSE, ATTN, ...) and ABLATION as for arise.sh. PRINT_OVERRIDES=1 prints the final overrides.
#   Folder: checkpoints/arise_<model>/gpu_check (one checkpoint, at the last step: the save is checked
#   too); each launch starts from scratch (trainer.resume_mode=disable).
#   The verdict again, later:  python -m recipe.arise.tools.verdict --scale gpu --launch-only <metrics.jsonl>
#   (exit 1: a FAIL, e.g. no ARISE activity; 2: the metrics could not be read)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${MODEL_PATH:?set MODEL_PATH (e.g. Qwen/Qwen3-4B-Instruct-2507)}"
export MODEL_PATH
export EXPERIMENT=${EXPERIMENT:-gpu_check${ABLATION:+_$ABLATION}${PRESET:+_$PRESET}}
export TOTAL_STEPS=${STEPS:-10}
export PHASE1_STEPS=${PHASE1_STEPS:-1} # Phase II from step 2
export SAVE_FREQ=${SAVE_FREQ:-$TOTAL_STEPS} TEST_FREQ=${TEST_FREQ:--1} KEEP_CKPTS=${KEEP_CKPTS:-1}
[ "${PRINT_OVERRIDES:-0}" = 1 ] && exec bash "$HERE/arise.sh" trainer.resume_mode=disable "$@"

# the metrics path the run writes (common.sh's default, unless VERL_FILE_LOGGER_PATH is set)
METRICS=$(
  source "$HERE/common.sh" >/dev/null
  echo "$VERL_FILE_LOGGER_PATH"
)
started=$SECONDS
rc=0
bash "$HERE/arise.sh" trainer.resume_mode=disable "$@" || rc=$?
echo "[gpu_check] the run ended (exit $rc) after $((SECONDS - started)) s; metrics: $METRICS"
[ -s "$METRICS" ] || { echo "[gpu_check] no metrics were written" >&2; exit 1; }
"${PYTHON:-python}" -m recipe.arise.tools.verdict --scale gpu --expect arise --launch-only "$METRICS" || rc=$?
exit "$rc"
