#!/usr/bin/env bash
# ARISE + GRPO on Phi-4-mini-instruct (paper setup: 8 GPUs, G=8, batch 64, 2,000 steps, N_w=500).
# Checkpoints and metrics: checkpoints/arise_phi4_mini/arise. Phi-4-mini's LongRoPE keeps its runs
# (ARISE, baselines, evaluation) at max_model_len 4096, so 2,816-token responses: common.sh's
# phi4_mini profile, checked by the preflight (docs/gpu.md: LongRoPE).
export MODEL_PATH=${MODEL_PATH:-microsoft/Phi-4-mini-instruct}
exec "$(dirname "$0")/arise.sh" "$@"
