#!/usr/bin/env bash
# ARISE + GRPO on Qwen3-4B-Instruct-2507 with the sandboxed Python tool: verl's multi-turn tool agent
# carrying ARISE's skill layer (`arise_tool_agent`), the paper's settings otherwise. Data:
# `bash data_prep/prepare_all.sh --tool python` (~/data/arise_tool). Baseline through the same path:
# `TOOL=python METHOD=grpo MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 bash run_scripts/baseline.sh`.
# Checkpoints and metrics: checkpoints/arise_qwen3_4b/arise_tool. docs/agent_loops.md
export MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507} TOOL=${TOOL:-python}
exec "$(dirname "$0")/arise.sh" "$@"
