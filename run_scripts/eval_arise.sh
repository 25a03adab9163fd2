#!/usr/bin/env bash
# Evaluate a checkpoint on AMC23, AIME24, AIME25 and the four Omni-MATH domains (paper Table 1):
# Pass@1 averaged over K samples, ARISE active (the checkpoint's library, epsilon=0, the gate).
# usage: MODEL_PATH=... CKPT=.../global_step_N run_scripts/eval_arise.sh [hydra overrides]
#   K=32 DECODING=sampled|greedy SKILLS=true|false OUT=... DATA_FILES="a.parquet b.parquet"
#   CPU=1 runs on the CPU path (tests use it with the tiny model).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${MODEL_PATH:?set MODEL_PATH (the base model the checkpoint was trained from)}"
DATA_DIR=${DATA_DIR:-$HOME/data/arise}
DATA_FILES=${DATA_FILES:-"$DATA_DIR/eval/amc23.parquet $DATA_DIR/eval/aime24.parquet $DATA_DIR/eval/aime25.parquet $DATA_DIR/eval/omni_math_algebra.parquet $DATA_DIR/eval/omni_math_number_theory.parquet $DATA_DIR/eval/omni_math_combinatorics.parquet $DATA_DIR/eval/omni_math_geometry.parquet"}
PYTHON=${PYTHON:-python}
ARGS=(--model "$MODEL_PATH" --data $DATA_FILES --k "${K:-32}" --decoding "${DECODING:-sampled}" --out "${OUT:-eval_out}")
[ -n "${CKPT:-}" ] && ARGS+=(--checkpoint "$CKPT")
[ -n "${LIBRARY:-}" ] && ARGS+=(--library "$LIBRARY")
[ "${SKILLS:-true}" = false ] && ARGS+=(--no-skills)
[ -n "${LABEL:-}" ] && ARGS+=(--label "$LABEL")
# the trainer is set up (not run) before validation: its batch settings must still be valid
OVERRIDES=(
  data.max_prompt_length=${MAX_PROMPT:-1024}
  data.max_response_length=${MAX_RESPONSE:-4096}
  data.train_batch_size=${TRAIN_BATCH:-64}
  actor_rollout_ref.actor.ppo_mini_batch_size=${TRAIN_BATCH:-64}
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=${MICRO_BATCH:-4}
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=${MICRO_BATCH:-4}
  actor_rollout_ref.rollout.tensor_model_parallel_size=${TP:-1}
  trainer.n_gpus_per_node=${GPUS_PER_NODE:-8}
)
if [ "${CPU:-0}" = 1 ]; then
  source "$HERE/cpu_env.sh"
  OVERRIDES+=("${CPU_OVERRIDES[@]}" data.max_prompt_length=160 data.max_response_length=24
    actor_rollout_ref.rollout.max_model_len=512 actor_rollout_ref.rollout.max_num_batched_tokens=2048
    actor_rollout_ref.rollout.enable_prefix_caching=False data.dataloader_num_workers=0
    data.train_batch_size=4 actor_rollout_ref.actor.ppo_mini_batch_size=4)
fi
exec "$PYTHON" -m recipe.arise.evaluate "${ARGS[@]}" -- "${OVERRIDES[@]}" "$@"
