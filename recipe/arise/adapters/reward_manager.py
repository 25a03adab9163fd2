"""ARISE reward manager for verl's reward loop: R = r_task + r_skill (App. D.2), phase-aware.

Load it with ``reward.reward_manager.source=importlib``,
``reward.reward_manager.module.path=pkg://recipe.arise.adapters.reward_manager`` and
``reward.reward_manager.name=ARISERewardManager`` (as ``arise_trainer.yaml`` does).

An environment episode (``arise_env_agent``: ``extra_fields["env"]``) is not graded: its ``won`` is
the task reward, and ``reward_extra_info`` adds ``env_turns``, ``env_invalid`` and ``env_failed``.

Reported per trajectory in ``reward_extra_info``: ``acc`` (binary correctness), ``score`` (R),
``skill_used``, ``skill_scored`` (the cache was scored for its query) and ``max_p`` (the softmax's
top probability the gate compared with delta; 0 when not scored) — at evaluation these tell a gate
that rejects every query apart from a library that was never consulted. Every training trajectory
is also posted to the library replica, so the library's UPDATE sees it even when dynamic sampling later
drops its group. With ``arise.summary.stream`` the trajectory's trace goes with it, and the one
that completes a claimed group starts the group's summary rollout O_{G+1} here, in the background,
while other groups are still generating (``recipe.arise.core.stream``).
"""

from __future__ import annotations

import asyncio
import logging
import os

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from recipe.arise.adapters.agent_loop import arise_config
from recipe.arise.adapters.library_replica import get_replica
from recipe.arise.adapters.rollout_failures import recorded
from recipe.arise.core.grader import grade_checked
from recipe.arise.core.observation import Observation
from recipe.arise.core.reward import hierarchical_reward
from recipe.arise.core.summary import generate_summary, summary_prompt_ids
from recipe.arise.core.trajectory import TrajectoryInfo
from recipe.arise.core.transcript import env_transcript

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))


EPISODE_FIELDS = {"won": bool, "turns": int, "invalid_actions": int, "transcript": str}


def env_episode(extra_fields) -> dict | None:
    """The environment episode ``arise_env_agent`` recorded (``extra_fields["env"]``), else None;
    ValueError naming the field when the record is not the loop's."""
    episode = extra_fields.get("env") if isinstance(extra_fields, dict) else None
    if episode is None:
        return None
    if not isinstance(episode, dict):
        raise ValueError(f"extra_fields['env'] must be arise_env_agent's episode record (a dict), got {episode!r:.200}")
    for key, kind in EPISODE_FIELDS.items():
        if not isinstance(episode.get(key), kind):
            raise ValueError(f"extra_fields['env'][{key!r}] must be a {kind.__name__}, got {episode.get(key)!r:.100}")
    return episode


class ARISERewardManager(RewardManagerBase):
    def __init__(self, config, tokenizer, compute_score=None, reward_router_address=None, reward_model_tokenizer=None):
        super().__init__(config, tokenizer, compute_score)
        self.arise = arise_config(config)
        self._summaries: set[asyncio.Task] = set()  # streamed summary rollouts still running
        self._llm_client = None

    async def run_single(self, data: DataProto) -> dict:
        item = data[-1]  # multi-output trajectories are scored on their last sequence
        fields = item.non_tensor_batch
        session = {"uid": fields.get("uid", ""), "session_id": fields.get("session_id", 0)}
        # an exception here fails the session's query group: told to the trainer (rollout_failures)
        return await recorded(self._reward(item), session)

    async def _reward(self, item) -> dict:
        response_ids = item.batch["responses"]
        valid_length = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
        ids = response_ids[:valid_length]
        # what the agent loop recorded (every field at its default for a plain single-turn loop)
        extra_fields = item.non_tensor_batch.get("tool_extra_fields", None)
        info = TrajectoryInfo.from_extra_fields(extra_fields)
        episode = env_episode(extra_fields)
        response = None
        if episode is not None:  # an environment episode: success is the environment's, nothing to grade
            correct, grader_error = episode["won"], None
        else:
            response = await self.loop.run_in_executor(
                None, lambda: self.tokenizer.decode(ids, skip_special_tokens=True)
            )
            ground_truth = item.non_tensor_batch["reward_model"]["ground_truth"]
            timeout = self.arise.reward.timeout_s
            correct, grader_error = await self.loop.run_in_executor(
                None, lambda: grade_checked(response, ground_truth, timeout_s=timeout)
            )
        skill_id = info.skill_id
        phase = info.phase  # the Manager's phase (selection, control arm)
        # ablation (a) keeps the Manager in Phase II and only the reward binary
        reward_phase = 1 if not self.arise.enable or self.arise.reward.binary else phase
        score = hierarchical_reward(
            bool(correct), bool(skill_id), reward_phase, skill_bonus=self.arise.reward.skill_bonus
        )

        replica = get_replica() if self.arise.enable else None
        if replica is not None and not info.validate:
            trace = None
            if self.arise.summary.enable and self.arise.summary.stream:
                trace = self._trace(item, ids, response, info, episode)
            messages = tool_selection = None
            if self.arise.selection.posts_queries(phase):
                # sigma is calibrated on the queries of every generated group, those dynamic sampling
                # drops included: the kept batch over-represents queries the gate passed (their
                # groups mix R=2 with the control arm's R=1), which would set sigma too strict
                messages = [dict(m) for m in list(item.non_tensor_batch.get("raw_prompt", None) or [])]
                extra = item.non_tensor_batch.get("extra_info", None)
                selection = extra.get("tool_selection") if isinstance(extra, dict) else None
                tool_selection = None if selection is None else [str(name) for name in selection]
            observation = Observation(
                uid=str(item.non_tensor_batch.get("uid", "")),
                reward=float(score),
                correct=bool(correct),
                trajectory=info,  # its score vector: arise.selection.temperature=auto calibrates sigma on it
                step=int(item.non_tensor_batch.get("global_steps", 0) or 0),
                prompt_tokens=int(item.non_tensor_batch.get("prompt_len", 0) or 0),
                response_tokens=int(valid_length),
                messages=messages,
                tool_selection=tool_selection,  # rescored in the context its prompt had
                grader_error=grader_error,
                env=None if episode is None else {k: v for k, v in episode.items() if k != "transcript"},
            )
            # Awaited so the observation is in the replica before the trajectory reaches the trainer.
            group = await replica.record.remote(observation, trace)
            if group is not None:  # this trajectory completed a group claimed for a summary
                task = asyncio.get_running_loop().create_task(self._stream_summary(replica, group))
                self._summaries.add(task)
                task.add_done_callback(self._summaries.discard)
        extra_info = {
            "acc": float(correct),
            "score": float(score),
            "skill_used": float(bool(skill_id)),
            "skill_scored": float(bool(info.scores)),
            "max_p": float(info.max_prob or 0.0),
        }
        if episode is not None:  # verl keys the batch's columns by its first row: a batch is all episodes or none
            extra_info.update(
                env_turns=float(episode["turns"]),
                env_invalid=float(episode["invalid_actions"]),
                env_failed=float(episode.get("failed") is not None),
            )
        return {"reward_score": float(score), "reward_extra_info": extra_info}

    def _trace(self, item, ids, response: str | None, record: TrajectoryInfo, episode: dict | None = None) -> dict:
        """What the summary prompt needs of this trajectory: its trace (without a skill line the
        Manager wrote at the start of the response; an environment episode's transcript, compacted
        to the summary's budget), the question, the chat messages."""
        text = response
        if episode is not None:
            cfg = self.arise.summary
            text = env_transcript(
                episode["transcript"], cfg.trace_clip_chars, cfg.tool_result_chars, cfg.transcript_chars
            ).text
        elif record.skill_in_response:
            lead = record.skill_tokens
            text = self.tokenizer.decode(ids[lead:], skip_special_tokens=True)
        messages = [dict(m) for m in list(item.non_tensor_batch.get("raw_prompt", None) or [])]
        info = item.non_tensor_batch.get("extra_info", None)
        question = info.get("question") if isinstance(info, dict) else None
        if not question:
            users = [m for m in messages if m.get("role") == "user"]
            question = str(users[-1].get("content", "")) if users else ""
        return {"text": text, "question": question, "messages": messages, "env": episode is not None}

    async def _stream_summary(self, replica, group: dict) -> None:
        """Generate a claimed group's summary on the rollout servers and deliver it to the replica;
        a failure is delivered too, so the trainer never waits for it past the wave."""
        cfg = self.arise.summary
        result = {"group": group, "token_ids": None, "error": None, "prompt_tokens": 0}
        try:
            if self._llm_client is None:
                self._llm_client = await replica.llm_client.remote()
            if self._llm_client is None:
                raise RuntimeError("the library replica holds no rollout client (the ARISE trainer publishes it)")
            kwargs = self.config.data.get("apply_chat_template_kwargs", None)
            prompt_ids = summary_prompt_ids(self.tokenizer, group, cfg, kwargs, self.arise.env.summary_domain)
            result["prompt_tokens"] = len(prompt_ids)
            result["token_ids"] = await generate_summary(self._llm_client, prompt_ids, cfg)
        except Exception as exc:  # delivered as a failed summary, as the trainer counts them
            logger.warning(f"ARISE streamed summary rollout failed: {exc!r}")
            result["error"] = repr(exc)
        await replica.stream_deliver.remote(result)
