#!/usr/bin/env bash
# The first hour on your GPUs: ARISE with your model, GPUs and settings for ~10 steps, Phase II from
# step 2, in its own checkpoint folder, then a verdict on everything that would make ARISE silently
# plain GRPO (scoring failures, no skill used, a gate that rejects everything, summaries that do not
# parse, no group mixing R=1 and R=2, rollout and actor log-probs that disagree) and on ARISE's
# share of the step time. Each verdict line: metric, value, threshold, OK/WARN/FAIL, what to do.
#
# It also runs what a long run does only now and then, so the first hour meets it: two launches,
# the second resuming the first's checkpoint (library, gate, weights); a validation at the end of
# each (trainer.test_freq); the exact IG (the only long prompt-log-prob requests) every IG_EVERY
# steps. After the verdict, recipe.arise.tools.gpu_check_coverage checks all three happened.
#
# usage: MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 run_scripts/gpu_check.sh [hydra overrides]
#        (MODEL_PATH=microsoft/Phi-4-mini-instruct: common.sh's Phi-4-mini profile applies, as in training)
#   STEPS=10 (>= 4: launch 1 runs steps 1..STEPS/2, launch 2 resumes to STEPS)  PHASE1_STEPS=1
#   IG_EVERY=2  every other variable of run_scripts/common.sh (GPUS_PER_NODE, TRAIN_BATCH,
#   MAX_RESPONSE, ATTN, ...) and ABLATION as for arise.sh. PRINT_OVERRIDES=1 prints the final
#   overrides of launch GPU_CHECK_LAUNCH (1, the default, or 2).
#   Folder: checkpoints/arise_<model>/gpu_check (one checkpoint kept); launch 1 starts from scratch
#   (trainer.resume_mode=disable), launch 2 resumes launch 1's global_step_<STEPS/2> by path.
#   GPU_CHECK_ONLY=1 runs launch 1 alone; GPU_CHECK_ONLY=2 then resumes it, with the verdict and the
#   coverage (two jobs where a job's time limit is shorter than the whole check).
#   The verdict again, later:  python -m recipe.arise.tools.verdict --scale gpu <metrics.jsonl>
#   (exit 1: a FAIL, e.g. no ARISE activity; 2: the metrics could not be read)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${MODEL_PATH:?set MODEL_PATH (e.g. Qwen/Qwen3-4B-Instruct-2507)}"
export MODEL_PATH
export EXPERIMENT=${EXPERIMENT:-gpu_check${ABLATION:+_$ABLATION}${PRESET:+_$PRESET}}
STEPS=${STEPS:-10}
IG_EVERY=${IG_EVERY:-2}
[[ "$STEPS" =~ ^[0-9]+$ ]] && ((STEPS >= 4)) || { echo "[gpu_check] STEPS must be an integer >= 4, got $STEPS" >&2; exit 2; }
[[ "$IG_EVERY" =~ ^[1-9][0-9]*$ ]] || { echo "[gpu_check] IG_EVERY must be an integer >= 1, got $IG_EVERY" >&2; exit 2; }
HALF=$((STEPS / 2))
ONLY=${GPU_CHECK_ONLY:-}
case "$ONLY" in "" | 1 | 2) ;; *) echo "[gpu_check] GPU_CHECK_ONLY must be 1 or 2, got $ONLY" >&2; exit 2 ;; esac
export PHASE1_STEPS=${PHASE1_STEPS:-1} # Phase II from step 2
export KEEP_CKPTS=${KEEP_CKPTS:-1}
# the folders the run writes (common.sh's defaults, unless CKPT_DIR / VERL_FILE_LOGGER_PATH are set)
CKPT_DIR=$(
  source "$HERE/common.sh" >/dev/null
  echo "$CKPT_DIR"
)
METRICS=$(
  source "$HERE/common.sh" >/dev/null
  echo "$VERL_FILE_LOGGER_PATH"
)

# launch 1: steps 1..HALF, validated and saved at HALF; launch 2: resumes global_step_HALF, to STEPS
launch() {
  local n=$1
  shift
  if [ "$n" = 1 ]; then
    TOTAL_STEPS=$HALF SAVE_FREQ=$HALF TEST_FREQ=$HALF bash "$HERE/arise.sh" trainer.resume_mode=disable \
      arise.ig.every_n_steps="$IG_EVERY" "$@"
  else
    TOTAL_STEPS=$STEPS SAVE_FREQ=$STEPS TEST_FREQ=$STEPS bash "$HERE/arise.sh" trainer.resume_mode=resume_path \
      trainer.resume_from_path="$CKPT_DIR/global_step_$HALF" arise.ig.every_n_steps="$IG_EVERY" "$@"
  fi
}
if [ "${PRINT_OVERRIDES:-0}" = 1 ]; then
  launch "${GPU_CHECK_LAUNCH:-1}" "$@"
  exit
fi

started=$SECONDS
rc=0
if [ "$ONLY" != 2 ]; then
  launch 1 "$@" || rc=$?
  echo "[gpu_check] launch 1 (steps 1-$HALF) ended (exit $rc) after $((SECONDS - started)) s"
  if [ "$ONLY" = 1 ]; then
    [ "$rc" = 0 ] && echo "[gpu_check] next: GPU_CHECK_ONLY=2 with the same settings resumes global_step_$HALF"
    exit "$rc"
  fi
elif [ ! -d "$CKPT_DIR/global_step_$HALF" ]; then
  echo "[gpu_check] GPU_CHECK_ONLY=2 resumes $CKPT_DIR/global_step_$HALF, which is not there:" \
    "run GPU_CHECK_ONLY=1 first, with the same settings (STEPS=$STEPS)" >&2
  exit 2
fi
if [ "$rc" = 0 ]; then
  launch 2 "$@" || rc=$?
  echo "[gpu_check] launch 2 (resumed, steps $((HALF + 1))-$STEPS) ended (exit $rc) after $((SECONDS - started)) s"
fi
echo "[gpu_check] metrics: $METRICS"
[ -s "$METRICS" ] || { echo "[gpu_check] no metrics were written" >&2; exit 1; }
"${PYTHON:-python}" -m recipe.arise.tools.verdict --scale gpu --expect arise "$METRICS" || rc=$?
"${PYTHON:-python}" -m recipe.arise.tools.gpu_check_coverage --resumed-at "$HALF" --steps "$STEPS" \
  --ig-every "$IG_EVERY" "$METRICS" || rc=$?
exit "$rc"
