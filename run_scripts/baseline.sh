#!/usr/bin/env bash
# GRPO-family baselines (paper Table 1) through the ARISE trainer with arise.enable=false: the same
# entry, data, budget, dynamic sampling (algorithm.filter_groups) and grader as ARISE; each method
# is verl's own config keys on top (docs/gpu.md: baselines).
# usage: METHOD=grpo|drgrpo|dapo|gspo MODEL_PATH=... run_scripts/baseline.sh [hydra overrides]
# TOOL=python: the same baseline with the Python tool (the tool agent, ARISE off; common.sh)
# ENV=twx|scienceworld|alfworld: the same baseline in that text environment (the env agent, ARISE
# off; common.sh), e.g. the GRPO-in-env baseline:
# ENV=twx METHOD=grpo MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 baseline.sh
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${MODEL_PATH:?set MODEL_PATH}"
METHOD=${METHOD:-grpo}
# checkpoints/arise_<model>/<method>[_tool|_env_<ENV>][_<preset>]
EXPERIMENT=${EXPERIMENT:-$METHOD${TOOL:+_tool}${ENV:+_env_$ENV}${PRESET:+_$PRESET}}
if [ "$METHOD" = dapo ] && [ -n "${ENV:-}" ]; then
  # DAPO's reward manager grades the response text; an episode's reward is the environment's verdict
  echo "METHOD=dapo with ENV=$ENV: DAPO's reward manager grades text, an episode is graded by its environment" >&2
  exit 2
fi
source "$HERE/common.sh"
OVERLONG_BUFFER=${OVERLONG_BUFFER:-$((MAX_RESPONSE / 5))} # DAPO's L_cache / L_max = 4096 / 20480
case "$METHOD" in
  grpo) METHOD_OVERRIDES=() ;;
  drgrpo) METHOD_OVERRIDES=(
      actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm
      algorithm.norm_adv_by_std_in_grpo=False) ;;
  dapo) METHOD_OVERRIDES=(
      actor_rollout_ref.actor.clip_ratio_low=0.2
      actor_rollout_ref.actor.clip_ratio_high=0.28
      actor_rollout_ref.actor.loss_agg_mode=token-mean
      algorithm.filter_groups.enable=True
      algorithm.filter_groups.metric=acc
      # verl's DAPO reward manager (overlong reward shaping) around the project's grader
      reward.reward_manager.source=register
      reward.reward_manager.name=dapo
      reward.custom_reward_function.path=pkg://recipe.arise.adapters.verl_score
      reward.custom_reward_function.name=compute_score
      ++reward.reward_kwargs.overlong_buffer_cfg.enable=True
      ++reward.reward_kwargs.overlong_buffer_cfg.len=$OVERLONG_BUFFER
      ++reward.reward_kwargs.overlong_buffer_cfg.penalty_factor=1.0
      ++reward.reward_kwargs.overlong_buffer_cfg.log=False
      ++reward.reward_kwargs.max_resp_len=$MAX_RESPONSE) ;;
  gspo) METHOD_OVERRIDES=(
      actor_rollout_ref.actor.policy_loss.loss_mode=gspo
      actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
      actor_rollout_ref.actor.clip_ratio_low=0.0003
      actor_rollout_ref.actor.clip_ratio_high=0.0004) ;;
  *) echo "unknown METHOD=$METHOD (grpo|drgrpo|dapo|gspo)" >&2; exit 2 ;;
esac
run_main recipe.arise.adapters.main_arise "${COMMON_OVERRIDES[@]}" arise.enable=false \
  ${METHOD_OVERRIDES[@]+"${METHOD_OVERRIDES[@]}"} \
  ${PRESET_OVERRIDES[@]+"${PRESET_OVERRIDES[@]}"} "$@"
