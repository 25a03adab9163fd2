"""ARISE reward manager for verl's reward loop: R = r_task + r_skill (App. D.2), phase-aware.

Load it with ``reward.reward_manager.source=importlib``,
``reward.reward_manager.module.path=pkg://recipe.arise.reward_manager`` and
``reward.reward_manager.name=ARISERewardManager`` (as ``arise_trainer.yaml`` does).

Reported per trajectory in ``reward_extra_info``: ``acc`` (binary correctness), ``score`` (R),
``skill_used``, ``skill_scored`` (the cache was scored for its query) and ``max_p`` (the softmax's
top probability the gate compared with delta; 0 when not scored) — at evaluation these tell a gate
that rejects every query apart from a library that was never consulted. Every training trajectory
is also posted to the skill pool, so the library's UPDATE sees it even when dynamic sampling later
drops its group.
"""

from __future__ import annotations

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from recipe.arise.agent_loop import arise_config
from recipe.arise.pool import get_pool
from recipe.arise.reward import grade, hierarchical_reward


class ARISERewardManager(RewardManagerBase):
    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score)
        self.arise = arise_config(config)

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1]  # multi-output trajectories are scored on their last sequence
        response_ids = item.batch["responses"]
        valid_length = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
        ids = response_ids[:valid_length]
        response = await self.loop.run_in_executor(None, lambda: self.tokenizer.decode(ids, skip_special_tokens=True))
        ground_truth = item.non_tensor_batch["reward_model"]["ground_truth"]
        fields = item.non_tensor_batch.get("tool_extra_fields", None) or {}

        timeout = self.arise.reward.timeout_s
        correct = await self.loop.run_in_executor(None, lambda: grade(response, ground_truth, timeout_s=timeout))
        skill_id = fields.get("arise_skill_id", "") or ""
        phase = int(fields.get("arise_phase", 1) or 1)  # the Manager's phase (selection, control arm)
        # ablation (a) keeps the Manager in Phase II and only the reward binary
        reward_phase = 1 if not self.arise.enable or self.arise.reward.binary else phase
        score = hierarchical_reward(
            bool(correct), bool(skill_id), reward_phase, skill_bonus=self.arise.reward.skill_bonus
        )

        pool = get_pool() if self.arise.enable else None
        if pool is not None and not fields.get("arise_validate", False):
            # Awaited so the observation is in the pool before the trajectory reaches the trainer.
            await pool.record.remote(
                {
                    "step": int(item.non_tensor_batch.get("global_steps", 0) or 0),
                    "uid": str(item.non_tensor_batch.get("uid", "")),
                    "skill_id": skill_id,
                    "reward": float(score),
                    "correct": bool(correct),
                    "phase": phase,
                    "selected": bool(fields.get("arise_selected", False)),
                    "control": bool(fields.get("arise_control", False)),
                    "gate_passed": fields.get("arise_gate_passed", None),
                    "scored": bool(fields.get("arise_scores")),
                    "scorer": bool(fields.get("arise_scorer", False)),
                    "scoring_failed": bool(fields.get("arise_scoring_failed", False)),
                    "scores_nonfinite": int(fields.get("arise_scores_nonfinite", 0) or 0),
                    "skill_overlong": bool(fields.get("arise_skill_overlong", False)),
                    "skill_tokens": int(fields.get("arise_skill_tokens", 0) or 0),
                    "scoring_s": float(fields.get("arise_scoring_s", 0.0) or 0.0),
                    "scoring_tokens": int(fields.get("arise_scoring_tokens", 0) or 0),
                    "scoring_cached_tokens": int(fields.get("arise_scoring_cached_tokens", 0) or 0),
                    "scoring_rescored": int(fields.get("arise_scoring_rescored", 0) or 0),
                    "prompt_tokens": int(item.non_tensor_batch.get("prompt_len", 0) or 0),
                    "response_tokens": int(valid_length),
                }
            )
        return {
            "reward_score": float(score),
            "reward_extra_info": {
                "acc": float(correct),
                "score": float(score),
                "skill_used": float(bool(skill_id)),
                "skill_scored": float(bool(fields.get("arise_scores"))),
                "max_p": float(fields.get("arise_max_prob") or 0.0),
            },
        }
