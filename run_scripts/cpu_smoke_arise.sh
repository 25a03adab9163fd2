#!/usr/bin/env bash
# ARISE end to end on CPU through the real verl trainer, with a tiny model built locally.
# Phase I (binary reward, summary rollouts fill the library), then Phase II (policy-scored
# selection, SKILL: injection, hierarchical reward), with checkpoints holding the library.
#
# usage: run_scripts/cpu_smoke_arise.sh [extra hydra overrides]
#   OUT_DIR=outputs/cpu_smoke  STEPS=4  PHASE1_STEPS=2  SAVE_FREQ=2  PYTHON=python
#   ARISE=true|false (false: plain GRPO baseline through the same code path)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/run_scripts/cpu_env.sh"
PYTHON=${PYTHON:-python}
OUT_DIR=$(mkdir -p "${OUT_DIR:-outputs/cpu_smoke}" && cd "${OUT_DIR:-outputs/cpu_smoke}" && pwd)
STEPS=${STEPS:-4}
PHASE1_STEPS=${PHASE1_STEPS:-2}
SAVE_FREQ=${SAVE_FREQ:-2}
ARISE=${ARISE:-true}
TINY=${TINY_DIR:-$OUT_DIR/tiny}

if [ ! -f "$TINY/tiny_assets.json" ]; then
  echo "[cpu_smoke] building the tiny model, tokenizer and dataset in $TINY"
  "$PYTHON" -m recipe.arise.cpu.tiny "$TINY"
fi
export VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-$OUT_DIR/metrics.jsonl}

cd "$OUT_DIR"
"$PYTHON" -m recipe.arise.main_arise \
  "${CPU_OVERRIDES[@]}" \
  data.train_files="$TINY/data/train.parquet" \
  data.val_files="$TINY/data/val.parquet" \
  data.train_batch_size=${BATCH:-4} \
  data.max_prompt_length=160 \
  data.max_response_length=24 \
  data.dataloader_num_workers=0 \
  data.filter_overlong_prompts=False \
  data.truncation=error \
  actor_rollout_ref.model.path="$TINY/model" \
  actor_rollout_ref.actor.optim.lr=${LR:-1e-4} \
  actor_rollout_ref.actor.ppo_mini_batch_size=${BATCH:-4} \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 \
  actor_rollout_ref.actor.use_kl_loss=False \
  actor_rollout_ref.rollout.n=${GROUP:-4} \
  actor_rollout_ref.rollout.enable_prefix_caching=False \
  actor_rollout_ref.rollout.max_num_batched_tokens=2048 \
  actor_rollout_ref.rollout.max_model_len=512 \
  actor_rollout_ref.rollout.max_num_seqs=64 \
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
  actor_rollout_ref.rollout.val_kwargs.n=1 \
  actor_rollout_ref.rollout.val_kwargs.do_sample=False \
  trainer.logger='["console","file"]' \
  trainer.project_name=arise_cpu_smoke \
  trainer.experiment_name=$([ "$ARISE" = true ] && echo arise || echo grpo) \
  trainer.default_local_dir="$OUT_DIR/checkpoints" \
  trainer.total_training_steps=$STEPS \
  trainer.total_epochs=100 \
  trainer.save_freq=$SAVE_FREQ \
  trainer.test_freq=-1 \
  trainer.val_before_train=False \
  trainer.resume_mode=auto \
  arise.enable=$ARISE \
  arise.phase1_steps=$PHASE1_STEPS \
  "$@"
echo "[cpu_smoke] done. metrics: $VERL_FILE_LOGGER_PATH  checkpoints: $OUT_DIR/checkpoints  library log: $OUT_DIR/checkpoints/arise/library_log"
