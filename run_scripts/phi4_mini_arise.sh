#!/usr/bin/env bash
# ARISE + GRPO on Phi-4-mini-instruct (paper setup: 8 GPUs, G=8, batch 64, 2,000 steps, N_w=500).
export MODEL_PATH=${MODEL_PATH:-microsoft/Phi-4-mini-instruct}
export PROJECT=${PROJECT:-arise_phi4_mini}
exec "$(dirname "$0")/arise.sh" "$@"
