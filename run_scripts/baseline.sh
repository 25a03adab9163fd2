#!/usr/bin/env bash
# GRPO-family baselines with verl's own config keys, same budget as ARISE (paper Table 1).
# usage: METHOD=grpo|drgrpo|dapo|gspo MODEL_PATH=... run_scripts/baseline.sh [hydra overrides]
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
: "${MODEL_PATH:?set MODEL_PATH}"
METHOD=${METHOD:-grpo}
EXPERIMENT=${EXPERIMENT:-$METHOD}
source "$HERE/common.sh"
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
      reward.reward_manager.name=dapo) ;;
  gspo) METHOD_OVERRIDES=(
      actor_rollout_ref.actor.policy_loss.loss_mode=gspo
      actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean
      actor_rollout_ref.actor.clip_ratio_low=0.0003
      actor_rollout_ref.actor.clip_ratio_high=0.0004) ;;
  *) echo "unknown METHOD=$METHOD (grpo|drgrpo|dapo|gspo)" >&2; exit 2 ;;
esac
# Same reward as ARISE's Phase I (the project's bounded math-verify grader), binary.
run_main verl.trainer.main_ppo "${COMMON_OVERRIDES[@]}" \
  reward.custom_reward_function.path=pkg://recipe.arise.verl_score \
  reward.custom_reward_function.name=compute_score \
  "${METHOD_OVERRIDES[@]}" "$@"
