#!/usr/bin/env bash
# ARISE on GPUs (paper setup). usage: MODEL_PATH=... run_scripts/arise.sh [hydra overrides]
# Ablations (paper Table 2), each one switch:  ABLATION=binary_reward|random_selection|no_summary|no_gate
# PRINT_OVERRIDES=1 prints the entry and overrides; SKIP_PREFLIGHT=1 skips recipe.arise.tools.preflight.
# CPU=1 layers run_scripts/cpu_env.sh on top (what run_scripts/cpu_smoke_arise.sh does).
# PRESET=<name> adds run_scripts/presets/<name>.sh's overrides (before the command line's).
# TOOL=python: the tool-using agent with the sandboxed Python tool (common.sh; docs/agent_loops.md).
# ENV=twx|scienceworld|alfworld: the env agent in that text environment (common.sh; docs/environments.md).
# Checkpoints: checkpoints/arise_<model>/arise[_tool|_env_<ENV>][_<ablation>][_<preset>] (EXPERIMENT, CKPT_DIR).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${MODEL_PATH:?set MODEL_PATH (e.g. Qwen/Qwen3-4B-Instruct-2507)}"
EXPERIMENT=${EXPERIMENT:-arise${TOOL:+_tool}${ENV:+_env_$ENV}${ABLATION:+_$ABLATION}${PRESET:+_$PRESET}}
case "${ABLATION:-}" in
  "") ABLATION_OVERRIDES=() ;;
  binary_reward) ABLATION_OVERRIDES=(arise.reward.binary=true) ;;
  random_selection) ABLATION_OVERRIDES=(arise.selection.random=true) ;;
  no_summary) ABLATION_OVERRIDES=(arise.summary.enable=false) ;;
  no_gate) ABLATION_OVERRIDES=(arise.selection.use_gate=false) ;;
  *) echo "unknown ABLATION=$ABLATION (binary_reward|random_selection|no_summary|no_gate)" >&2; exit 2 ;;
esac
source "$HERE/common.sh"
run_main recipe.arise.adapters.main_arise "${COMMON_OVERRIDES[@]}" \
  arise.phase1_steps=${PHASE1_STEPS:-500} \
  ${ABLATION_OVERRIDES[@]+"${ABLATION_OVERRIDES[@]}"} \
  ${PRESET_OVERRIDES[@]+"${PRESET_OVERRIDES[@]}"} "$@"
