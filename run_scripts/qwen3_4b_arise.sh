#!/usr/bin/env bash
# ARISE + GRPO on Qwen3-4B-Instruct-2507 (paper setup: 8 GPUs, G=8, batch 64, 2,000 steps, N_w=500).
# Checkpoints and metrics: checkpoints/arise_qwen3_4b/arise (run_scripts/common.sh: MODEL_TAG).
export MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507}
exec "$(dirname "$0")/arise.sh" "$@"
