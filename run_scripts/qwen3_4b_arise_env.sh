#!/usr/bin/env bash
# ARISE + GRPO on Qwen3-4B-Instruct-2507 in a multi-turn text environment:
# ENV=twx|scienceworld|alfworld (no default), the env agent (`arise_env_agent`) with ARISE's skill
# layer, on the games of `python -m recipe.arise.data_prep.env --env $ENV --out ~/data/arise/env/$ENV`.
# The paper's settings where they apply (G=8, lr 1e-6, 8 GPUs), the peers' where they do not
# (common.sh: 16 games a step, 200 steps, Phase I 50, the turn budget 15 in TWX and 50 in ScienceWorld
# and ALFWorld; docs/environments.md; ALFWorld reads its games from $ALFWORLD_DATA).
# Baseline through the same path: `ENV=twx METHOD=grpo MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 bash
# run_scripts/baseline.sh`. Checkpoints and metrics: checkpoints/arise_qwen3_4b/arise_env_<ENV>.
: "${ENV:?set ENV=twx, ENV=scienceworld or ENV=alfworld (the environment to train in)}"
export MODEL_PATH=${MODEL_PATH:-Qwen/Qwen3-4B-Instruct-2507} ENV
exec "$(dirname "$0")/arise.sh" "$@"
