#!/usr/bin/env bash
# Evaluate a checkpoint on AMC23, AIME24, AIME25 and the four Omni-MATH domains (paper Table 1):
# Pass@1 averaged over K samples, ARISE active (the checkpoint's library, epsilon=0, the gate).
# usage: MODEL_PATH=... CKPT=.../global_step_N run_scripts/eval_arise.sh [hydra overrides]
#   K=32 DECODING=sampled|greedy SKILLS=true|false OUT=eval_out DATA_FILES="a.parquet b.parquet"
#   LIBRARY=final|seeds|none|<file>: the checkpoint's library (default with CKPT) | the seed skills
#   (default without) | no skills (as SKILLS=false) | a library.parquet or a skills.jsonl exported by
#   `python -m recipe.arise.tools.inspect_run RUN --export F`, with the checkpoint's weights. LABEL=...; the
#   engine settings (ROLLOUT, ATTN, GPUS_PER_NODE, TP, GPU_MEM_UTIL,
#   MAX_PROMPT, MAX_RESPONSE, MAX_MODEL_LEN, ...) are common.sh's, as in training.
#   PRINT_OVERRIDES=1 prints the final entry and overrides; SKIP_PREFLIGHT=1 skips the preflight.
#   CPU=1 layers run_scripts/cpu_env.sh on top (tests use it with the tiny model); PRESET=<name> as in
#   training; VAL_BATCH questions per validation batch (data.val_batch_size, common.sh).
#   ENV=twx|scienceworld|alfworld: the env agent on that environment's test games (DATA_DIR/test.parquet
#   of `python -m recipe.arise.data_prep.env`; K=4 episodes per game by default): success per task type,
#   Table-1-like (docs/environments.md: evaluation).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${MODEL_PATH:?set MODEL_PATH (the base model the checkpoint was trained from)}"
source "$HERE/common.sh"
if [ -n "$ENV" ]; then
  DATA_FILES=${DATA_FILES:-$DATA_DIR/test.parquet} K=${K:-4}
fi
DATA_FILES=${DATA_FILES:-"$DATA_DIR/eval/amc23.parquet $DATA_DIR/eval/aime24.parquet $DATA_DIR/eval/aime25.parquet $DATA_DIR/eval/omni_math_algebra.parquet $DATA_DIR/eval/omni_math_number_theory.parquet $DATA_DIR/eval/omni_math_combinatorics.parquet $DATA_DIR/eval/omni_math_geometry.parquet"}
read -r -a DATA <<<"$DATA_FILES"
ARGS=(--model "$MODEL_PATH" --data "${DATA[@]}" --k "${K:-32}" --decoding "${DECODING:-sampled}" --out "${OUT:-eval_out}")
[ -n "${CKPT:-}" ] && ARGS+=(--checkpoint "$CKPT")
[ -n "${LIBRARY:-}" ] && ARGS+=(--library "$LIBRARY")
[ "${SKILLS:-true}" = false ] && ARGS+=(--no-skills)
[ -n "${LABEL:-}" ] && ARGS+=(--label "$LABEL")
[ "${PRINT_OVERRIDES:-0}" = 1 ] && ARGS+=(--print-overrides)
[ "${SKIP_PREFLIGHT:-0}" = 1 ] && ARGS+=(--skip-preflight)
# evaluate.py owns the evaluation keys (data files, val_kwargs, val_only, resume, logger, output
# folders); the engine settings come from common.sh, as in training
exec "$PYTHON" -m recipe.arise.tools.evaluate "${ARGS[@]}" -- "${EVAL_OVERRIDES[@]}" \
  ${PRESET_OVERRIDES[@]+"${PRESET_OVERRIDES[@]}"} "$@"
