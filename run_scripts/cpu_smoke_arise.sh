#!/usr/bin/env bash
# ARISE end to end on CPU through the real verl trainer, with a tiny model built locally: Phase I
# (binary reward, summary rollouts fill the library), then Phase II (policy-scored selection,
# SKILL: injection, hierarchical reward), with checkpoints holding the library.
#
# A thin wrapper: it sets the tiny run's environment and execs run_scripts/arise.sh with CPU=1, so
# the run takes the GPU scripts' own path (common.sh's overrides, the preflight) with the CPU layer
# (run_scripts/cpu_env.sh) on top.
#
# usage: run_scripts/cpu_smoke_arise.sh [extra hydra overrides]
#   OUT_DIR=outputs/cpu_smoke (ARISE=false: outputs/cpu_smoke_grpo)  TINY_DIR=(default: a content-keyed
#   cache)  STEPS=6  PHASE1_STEPS=2  SAVE_FREQ=2  BATCH=4  GROUP=4  LR=1e-4  PYTHON=python
#   VERL_FILE_LOGGER_PATH=$OUT_DIR/metrics.jsonl (a resumed launch moves the previous one's file to
#   metrics.launchN.jsonl, its run.log to run.launchN.log)  TRAIN_FILES, VAL_FILES (your own data with
#   the tiny model; default: the tiny assets' addition problems)
#   ARISE=true|false (false: plain GRPO baseline through the same code path)
#   TOOL=python: the tool agent (common.sh's TOOL overrides: arise_tool_agent, the sandboxed python
#   tool) on the tiny tool assets (recipe.arise.cpu.tiny_tool: the warm start also teaches the
#   tool-call format), in outputs/cpu_smoke_tool (ARISE=false: outputs/cpu_smoke_tool_grpo)
#   TRAINER_MODE=sync|colocate_async|separate_async: verl's v1 trainer mode ARISE runs under (common.sh;
#   default sync; colocate_async: outputs/cpu_smoke_colocate_async and so on; separate_async: two fake
#   "GPU" slots and the CPU weight sync, run_scripts/cpu_env.sh)
#   ENV=twx|scienceworld: the env agent (common.sh's ENV overrides: arise_env_agent) on the tiny env
#   assets (the warm start also teaches the episode format): TextWorldExpress's coin game
#   (recipe.arise.cpu.tiny_env) or ScienceWorld's lifespan-longest-lived (recipe.arise.cpu.tiny_env_sw),
#   in outputs/cpu_smoke_env_<ENV> (ARISE=false: outputs/cpu_smoke_env_<ENV>_grpo); not with TOOL
# It ends with `python -m recipe.arise.tools.verdict --scale tiny --expect arise|grpo` on the run's
# metrics (every launch): exit status 1 when the verdict says FAIL (e.g. no skill ever used in Phase
# II, or no ARISE activity at all), 2 when the metrics cannot be read; ARISE=false expects ARISE off.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
abspath() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
ARISE=${ARISE:-true}
case "$ARISE" in true | false) ;; *) echo "ARISE must be true or false, got $ARISE" >&2; exit 2 ;; esac
# the GRPO run has its own folder: it must never resume the ARISE run's checkpoints
TOOL=${TOOL:-}
case "$TOOL" in "" | python) ;; *) echo "TOOL must be python or unset, got $TOOL" >&2; exit 2 ;; esac
ENV=${ENV:-}
case "$ENV" in
  "" | twx | scienceworld) ;;
  *) echo "ENV must be twx, scienceworld or unset (the tiny env assets play those), got $ENV" >&2; exit 2 ;;
esac
if [ -n "$ENV" ] && [ -n "$TOOL" ]; then
  echo "ENV=$ENV and TOOL=$TOOL together: a run has one agent (the env agent or the tool agent); unset one" >&2
  exit 2
fi
# a trainer mode other than sync has its own folder too (its checkpoints hold verl's TransferQueue state)
MODE_TAG=$([ "${TRAINER_MODE:-sync}" = sync ] || echo "_$TRAINER_MODE")
OUT_DIR=$(abspath "${OUT_DIR:-outputs/cpu_smoke${TOOL:+_tool}${ENV:+_env_$ENV}$([ "$ARISE" = true ] || echo _grpo)$MODE_TAG}")
TINY_DIR=${TINY_DIR:-}
PYTHON=${PYTHON:-python}
case "$PYTHON" in */*) PYTHON=$(abspath "$PYTHON") ;; esac
# the tool (env) assets' warm start also teaches the tool-call (episode) format
TINY_MODULE=recipe.arise.cpu.tiny${TOOL:+_tool}${ENV:+_env}
[ "$ENV" = scienceworld ] && TINY_MODULE=recipe.arise.cpu.tiny_env_sw
if [ -n "$TOOL" ]; then
  # the prompt holds the tool list (~190 tokens, ~260 with a skill); the summary prompt has none,
  # so its room shrinks: 288 + 256 + max(288, 480) = 1,024, the tiny model's positions. The tiny
  # model calls once and answers; a tool result is one number: 2 results x 64 fit the response.
  export MAX_PROMPT=${MAX_PROMPT:-288} SUMMARY_ROOM=${SUMMARY_ROOM:-480}
  export TOOL_TURNS=${TOOL_TURNS:-3} TOOL_RESPONSE=${TOOL_RESPONSE:-64}
fi
if [ "$ENV" = scienceworld ]; then
  # ScienceWorld's rooms are long: the first prompt (task, room, 40 of its ~115 actions) holds up to
  # ~800 tokens with a skill, the response 3 replies and 2 observations with their actions up to
  # ~1,280 (an episode that fills it stops); 1,024 + 256 + max(1,024, 1,344) = 2,624 of 4,096 positions
  export MAX_PROMPT=${MAX_PROMPT:-1024} MAX_RESPONSE=${MAX_RESPONSE:-1024} SUMMARY_ROOM=${SUMMARY_ROOM:-1344}
  export ENV_TURNS=${ENV_TURNS:-3}
elif [ -n "$ENV" ]; then
  # the prompt holds the task and the first observation with its admissible actions (~210 tokens,
  # ~260 with a skill); the response 3 replies and the 2 observations between them (~330); the
  # summary prompt 2 episode transcripts of <= 1,600 chars (the preflight's bound: 1,878 tokens in
  # all): 320 + 256 + max(448, 1344) = 1,920 of the tiny env model's 2,048 positions
  export MAX_PROMPT=${MAX_PROMPT:-320} MAX_RESPONSE=${MAX_RESPONSE:-448} SUMMARY_ROOM=${SUMMARY_ROOM:-1344}
  export ENV_TURNS=${ENV_TURNS:-3}
fi

if [ -n "$TINY_DIR" ]; then
  TINY=$(abspath "$TINY_DIR")
  if [ "${PRINT_OVERRIDES:-0}" != 1 ] && [ ! -f "$TINY/tiny_assets.json" ]; then
    echo "[cpu_smoke] building the tiny model, tokenizer and dataset in $TINY"
    "$PYTHON" -m "$TINY_MODULE" "$TINY"
  fi
elif [ "${PRINT_OVERRIDES:-0}" = 1 ]; then
  # printing the overrides builds nothing: a stand-in the preflight knows (preflight_common.TINY_PLACEHOLDER;
  # it checks the cached assets in its place when they are built)
  TINY=/arise-tiny-assets-built-at-launch/$TINY_MODULE
else
  # the default assets live in a content-keyed cache (~/.cache/arise, $ARISE_CACHE): built once
  echo "[cpu_smoke] the tiny model, tokenizer and dataset (built locally on first use, ~1-2 min)"
  TINY=$("$PYTHON" -m "$TINY_MODULE" --cached | tail -n 1)
  echo "[cpu_smoke] tiny assets: $TINY"
fi

export PYTHON TOOL ENV CPU=1
export MODEL_PATH="$TINY/model"
# your own data (TRAIN_FILES, VAL_FILES: a parquet file, or VAL_FILES="['a.parquet','b.parquet']") with
# the tiny model; by default the tiny assets' addition problems
files() { case "$1" in \[*) printf '%s\n' "$1" ;; *) abspath "$1" ;; esac; } # Ray workers' cwd differs
TRAIN_FILES=$(files "${TRAIN_FILES:-$TINY/data/train.parquet}") VAL_FILES=$(files "${VAL_FILES:-$TINY/data/val.parquet}")
export TRAIN_FILES VAL_FILES
export TRAIN_BATCH=${BATCH:-4} GROUP_SIZE=${GROUP:-4} LR=${LR:-1e-4}
export LR_WARMUP_STEPS=0 LR_SCHEDULER=constant # a few steps: no warm-up, no decay
export TOTAL_STEPS=${STEPS:-6} PHASE1_STEPS=${PHASE1_STEPS:-2} SAVE_FREQ=${SAVE_FREQ:-2} TEST_FREQ=-1
export PROJECT=arise_cpu_smoke EXPERIMENT=$([ "$ARISE" = true ] && echo arise || echo grpo)
export CKPT_DIR="$OUT_DIR/checkpoints" HYDRA_DIR="$OUT_DIR/hydra" LOGGER='["console","file"]'
export VERL_FILE_LOGGER_PATH=$(abspath "${VERL_FILE_LOGGER_PATH:-$OUT_DIR/metrics.jsonl}")

export LOG_FILE=$(abspath "${LOG_FILE:-$OUT_DIR/run.log}")  # Ray/vLLM/verl output; the console gets a line per step

ARGS=(
  data.filter_overlong_prompts=False
  actor_rollout_ref.rollout.val_kwargs.n=1
  actor_rollout_ref.rollout.val_kwargs.do_sample=False
  trainer.resume_mode=auto
  arise.enable=$ARISE
  "$@"
)
if [ "${PRINT_OVERRIDES:-0}" = 1 ]; then
  exec bash "$ROOT/run_scripts/arise.sh" "${ARGS[@]}"
fi
started=$SECONDS
bash "$ROOT/run_scripts/arise.sh" "${ARGS[@]}"
verdict=0
"$PYTHON" -m recipe.arise.tools.verdict --scale tiny --expect "$([ "$ARISE" = true ] && echo arise || echo grpo)" \
  "$VERL_FILE_LOGGER_PATH" || verdict=$?
if [ "$ARISE" = true ]; then
  cat <<EOF
[cpu_smoke] done in $((SECONDS - started)) s. Outputs under $OUT_DIR:
  metrics (verl's file tracker, arise/* included)  $VERL_FILE_LOGGER_PATH (earlier launches: *.launchN.jsonl)
  checkpoints, each with arise/library.parquet     $OUT_DIR/checkpoints/global_step_N
  per-step library log                             $OUT_DIR/checkpoints/arise/library_log
  full console output (Ray, vLLM, verl)            $LOG_FILE (earlier launches: *.launchN.log)
  the library:  $PYTHON -m recipe.arise.tools.inspect_run $OUT_DIR/checkpoints --sort utility
  a report:     $PYTHON -m recipe.arise.tools.report $OUT_DIR
EOF
else # plain GRPO: no library, no library log, nothing for ARISE's tools to show
  cat <<EOF
[cpu_smoke] done in $((SECONDS - started)) s (plain GRPO, ARISE off). Outputs under $OUT_DIR:
  metrics (verl's file tracker)          $VERL_FILE_LOGGER_PATH (earlier launches: *.launchN.jsonl)
  checkpoints                            $OUT_DIR/checkpoints/global_step_N
  full console output (Ray, vLLM, verl)  $LOG_FILE (earlier launches: *.launchN.log)
EOF
fi
exit "$verdict"
