"""The Upload channel of the ARISE trainer: the summary rollouts O_{G+1} and the exact IG.

A mixin of :class:`~recipe.arise.adapters.trainer.ARISEHooks`, run per sampled batch while the
rollout replicas are awake: each query group's tau+ traces read from the transfer queue, the summary
rollouts of the chosen groups (or those the reward workers streamed, ``arise.summary.stream``) on
the rollout servers, and every ``arise.ig.every_n_steps`` the paper's exact IG (App. D.3) of the
cache skills. What it reads of the trainer it is mixed into is declared in :class:`UploadHost`
(tests/adapters/test_trainer_interfaces.py checks it). :func:`batch_fields` is the trainer's one
reader of a sampled batch's fields.
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import ray
import transfer_queue as tq

from recipe.arise.adapters.scoring_requests import SCORING_PARAMS
from recipe.arise.adapters.trainer_metrics import StepState
from recipe.arise.adapters.trainer_setup import needs_set_up
from recipe.arise.core.groups import exact_information_gain, positive_advantage_sessions
from recipe.arise.core.prompts import inject_skill
from recipe.arise.core.scoring import scoring_suffix
from recipe.arise.core.selection import truncate_skill_for_scoring
from recipe.arise.core.summary import summary_prompt_ids, summary_sampling_params, summary_skills
from recipe.arise.core.trajectory import TrajectoryInfo, as_list
from recipe.arise.core.transcript import env_transcript, trace_transcript

if TYPE_CHECKING:
    from recipe.arise.adapters.scoring_context import ScoringContext
    from recipe.arise.core.arise_config import ARISEConfig
    from recipe.arise.core.library import SkillLibrary

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))


def batch_fields(batch, fields: list[str]) -> dict[str, Any] | None:
    """``fields`` of the rows of a sampled batch (verl's ``keys``/``tags``/``partition_id``) that are
    not padding, from the transfer queue; None when every row is padding."""
    keys = [key for key, tag in zip(batch.keys, batch.tags, strict=True) if not tag.get("is_padding", False)]
    if not keys:
        return None
    return tq.kv_batch_get(keys=keys, partition_id=batch.partition_id, select_fields=fields)


class UploadHost(Protocol):
    """What :class:`UploadMixin` reads of its host (:class:`~recipe.arise.adapters.trainer.ARISEHooks`),
    who sets each and when."""

    arise: ARISEConfig  # ARISETrainer.__init__, before verl's __init__
    config: Any  # verl's trainer config: PPOTrainer.__init__
    tokenizer: Any  # PPOTrainer.__init__ (the actor's model config)
    # ARISETrainer._load_checkpoint (None before it, and with arise.enable=false)
    library: SkillLibrary | None
    library_replica: Any  # ARISETrainer._load_checkpoint: the library replica actor (None before)
    _step_state: StepState  # ARISETrainer.__init__; a fresh one each global step (_arise_maintain)

    def _generate_all(self, prompts: list[list[int]], params: dict, timeout_s: float) -> list:
        """ARISETrainer: one request per prompt on the rollout servers (errors come back as values)."""

    def _scoring_context(self, extra_info: Any = None) -> ScoringContext:
        """ARISETrainer: the agent loop's scoring context (for a sample's ``extra_info``)."""


class UploadMixin:
    """The trainer's summary rollouts and exact IG. The summaries and the exact IG need the library
    (and streaming its replica): they run only after the host's ``_load_checkpoint`` built them; a
    call before raises :class:`~recipe.arise.adapters.trainer_setup.SetUpError`."""

    def _tau_plus_groups(self, batch) -> list[dict[str, Any]]:
        """Each query group with tau+ non-empty or a correct unaided trace: question, messages, success
        rate, its tau+ traces best reward first (text, reward, token ids; a multi-turn trace's text is
        its transcript, with ``tool_turns``; an environment episode's is its own transcript, marked
        ``env``; empty for a group without tau+, which only the exact IG uses) and its correct
        unaided traces (``unaided``)."""
        # verl's TQ agent loop stores AgentLoopOutput.extra_fields (the arise_* keys) as one field
        fields = ["uid", "responses", "response_mask", "rm_scores", "raw_prompt", "extra_info", "extra_fields"]
        data = batch_fields(batch, fields)
        if data is None:
            return []
        train_manager = self.arise.selection.train_manager
        lengths = data["responses"].offsets().diff().tolist()  # jagged: each row's own length
        responses = data["responses"].to_padded_tensor(padding=self.tokenizer.pad_token_id)
        # 0 = the tool results a multi-turn agent loop appended; absent: every token is the policy's
        masks = data["response_mask"].to_padded_tensor(padding=1) if "response_mask" in data.keys() else None
        extra_fields = as_list(data.pop("extra_fields"))
        records = [TrajectoryInfo.from_extra_fields(e) for e in extra_fields]
        # arise_env_agent's episodes: their transcript (observations and actions), not the tokens'
        episodes = [e.get("env") if isinstance(e, dict) else None for e in extra_fields]
        # the skill each trajectory was generated under ("" = unaided): the exact IG uses unaided ones
        skill_of = [r.skill_id for r in records]
        # with train_manager the response starts with the skill line: a trace is what follows it
        starts = [0] * len(lengths)
        if train_manager:
            starts = [r.skill_tokens if r.skill_in_response else 0 for r in records]
        rewards = data["rm_scores"].to_padded_tensor(padding=0.0).sum(dim=1).tolist()
        uids = as_list(data.pop("uid"))
        raw_prompts = as_list(data.pop("raw_prompt"))
        extra_infos = as_list(data.pop("extra_info"))

        members_of: dict[str, list[int]] = {}
        for i, uid in enumerate(uids):
            members_of.setdefault(str(uid), []).append(i)
        out = []
        cfg = self.arise.summary

        def decode(ids):
            return self.tokenizer.decode(ids, skip_special_tokens=True)

        for uid, members in members_of.items():
            member_rewards = [rewards[i] for i in members]
            positive = positive_advantage_sessions(member_rewards)
            has_unaided = any(r > 0 and not skill_of[members[j]] for j, r in enumerate(member_rewards))
            if not positive and not has_unaided:
                continue
            positive.sort(key=lambda j: -member_rewards[j])  # best rewards first, ties in session order
            first = members[0]
            info = extra_infos[first] if isinstance(extra_infos[first], dict) else {}
            messages = list(raw_prompts[first] or [])
            traces = []
            for j in positive:
                row = members[j]
                span = slice(starts[row], int(lengths[row]))
                ids = [int(t) for t in responses[row][span].tolist()]
                mask = None if masks is None else masks[row][span].tolist()
                limits = (cfg.trace_clip_chars, cfg.tool_result_chars, cfg.transcript_chars)
                if isinstance(episodes[row], dict):
                    transcript = env_transcript(episodes[row]["transcript"], *limits)
                else:
                    transcript = trace_transcript(ids, mask, decode, *limits)
                trace = {"text": transcript.text, "reward": float(member_rewards[j]), "ids": ids}
                trace.update(skill_id=skill_of[row], tool_turns=transcript.tool_turns, env=episodes[row] is not None)
                traces.append(trace)
            # correct unaided traces (also those outside tau+: in Phase II an R=1 control-arm trace
            # often has a negative advantage beside R=2 ones), best reward first: the exact IG's traces
            unaided = sorted(
                (j for j, r in enumerate(member_rewards) if r > 0 and not skill_of[members[j]]),
                key=lambda j: -member_rewards[j],
            )
            unaided_traces = [
                {
                    "reward": float(member_rewards[j]),
                    "ids": [int(t) for t in responses[members[j]][: int(lengths[members[j]])].tolist()],
                }
                for j in unaided
            ]
            out.append(
                {
                    "uid": uid,
                    "question": info.get("question") or _last_user_turn(messages),
                    "messages": messages,
                    "extra_info": info,  # verl's per-sample tool_selection: the exact IG renders with it
                    "success_rate": float(np.mean([r > 0 for r in member_rewards])),
                    "traces": traces,
                    "unaided": unaided_traces,
                }
            )
        return out

    def _summary_rollouts(self, groups: list[dict[str, Any]], step: int):
        """The summary rollouts of ``groups`` after the wave, concurrently on the rollout servers."""
        cfg = self.arise.summary
        if not groups:
            return summary_skills(self.tokenizer, [], [], 0, cfg, step, logger)
        kwargs = self.config.data.get("apply_chat_template_kwargs", None)
        domain = self.arise.env.summary_domain
        prompts = [summary_prompt_ids(self.tokenizer, group, cfg, kwargs, domain) for group in groups]
        outputs = self._generate_all(prompts, summary_sampling_params(cfg), cfg.timeout_s)
        return summary_skills(self.tokenizer, groups, outputs, sum(len(ids) for ids in prompts), cfg, step, logger)

    def _streamed_summaries(self, step: int):
        """The summaries the reward workers started during the wave (``arise.summary.stream``):
        wait for those still running (at most ``timeout_s``), then close the batch's stream."""
        cfg = self.arise.summary
        deadline = time.perf_counter() + cfg.timeout_s
        delivered: list[dict[str, Any]] = []
        waited = time.perf_counter()
        replica = needs_set_up(self.library_replica, "library_replica", "ARISETrainer._load_checkpoint()")
        while True:
            claimed, new = ray.get(replica.stream_collect.remote())
            delivered += new
            if len(delivered) >= claimed or time.perf_counter() > deadline:
                break
            time.sleep(0.01)
        ray.get(replica.stream_end.remote())
        self._step_state.summary_wait_s += time.perf_counter() - waited
        self._step_state.summary_streamed += len(delivered)
        groups = [r["group"] for r in delivered]
        outputs = [
            r["token_ids"] if r.get("token_ids") is not None else RuntimeError(r.get("error")) for r in delivered
        ]
        missing = claimed - len(delivered)  # still running at the deadline: failed, as without streaming
        if missing > 0:
            logger.warning(f"ARISE: {missing} streamed summary rollout(s) not back after {cfg.timeout_s}s")
        new_skills, stats = summary_skills(
            self.tokenizer, groups, outputs, sum(int(r.get("prompt_tokens", 0)) for r in delivered), cfg, step, logger
        )
        stats["attempts"] += max(0, missing)
        stats["failed"] += max(0, missing)
        return new_skills, stats

    def _exact_ig(self, groups: list[dict[str, Any]], step: int) -> tuple[dict[str, float], int]:
        """The paper's exact IG (App. D.3) of every cache skill over up to ``ig.max_traces`` correct
        *unaided* traces of this step (one per query group, its best): prompt log-probs of each
        trace with and without the skill, on the rollout engine. Unaided traces only: a trace
        generated under one skill is likelier under that skill's context than under any other's,
        which would favour the skill that wrote it. The skill goes where the agent loop injects it
        (:meth:`_ig_context`). Stored on the entries (``ig_exact``, ``ig_step``); a diagnostic only,
        so it never stops training: a trace whose log-probs did not come back (no ``prompt_logprobs``,
        too short, a failed request) is skipped for every skill. Returns the IG per cache skill id and
        the number of traces skipped (arise/ig_skipped)."""
        cfg = self.arise.ig
        rng = np.random.default_rng([self.arise.seed, step, 7])
        traces = []
        for i in rng.permutation(len(groups)):
            ids = _unaided_trace(groups[i])
            if ids:
                clipped = ids[: cfg.max_response_tokens or None]
                traces.append((groups[i]["messages"], groups[i].get("extra_info"), clipped))
            if len(traces) >= cfg.max_traces:
                break
        cache = list(needs_set_up(self.library, "library", "ARISETrainer._load_checkpoint()").cache)
        if not traces or not cache:
            return {}, 0
        contexts = [
            [self._ig_context(messages, None if s is None else s.doc, extra_info) for messages, extra_info, _ in traces]
            for s in [None, *cache]
        ]
        # one length per trace under every context (IG compares sums over the same tokens), clipped so
        # that no request makes the engine build more than max_logits_mb of prompt logits; a trace left
        # without room is skipped
        bound = ig_request_tokens(cfg.max_logits_mb, self.tokenizer)
        lengths = [min(len(ids), bound - max(len(row[t]) for row in contexts)) for t, (*_, ids) in enumerate(traces)]
        clipped = sum(0 < n < len(ids) for n, (*_, ids) in zip(lengths, traces, strict=True))
        roomless = [t for t, n in enumerate(lengths) if n <= 0]
        self._step_state.ig_clipped += clipped
        if clipped or roomless:
            logger.warning(
                f"ARISE exact IG, step {step}: {clipped} trace(s) clipped and {len(roomless)} skipped to fit "
                f"{bound} tokens a request (arise.ig.max_logits_mb={cfg.max_logits_mb})"
            )
        fits = [t for t in range(len(traces)) if lengths[t] > 0]
        if not fits:
            return {}, len(traces)
        prompts, spans = [], []
        for row in contexts:
            for t in fits:
                ids = traces[t][2][: lengths[t]]
                prompts.append(row[t] + ids)
                spans.append((len(row[t]), len(row[t]) + len(ids)))
        params = SCORING_PARAMS
        outputs = self._generate_all(prompts, params, self.arise.selection.scoring_timeout_s)
        sums = [_logprob_sum(output, lo, hi) for output, (lo, hi) in zip(outputs, spans, strict=True)]
        n = len(fits)
        rows = [sums[k * n : (k + 1) * n] for k in range(len(cache) + 1)]  # the base, then one per skill
        keep = [t for t in range(n) if all(row[t] is not None for row in rows)]
        skipped = len(traces) - len(keep)
        if skipped:
            logger.warning(f"ARISE exact IG, step {step}: {skipped} of {len(traces)} traces without log-probs; skipped")
        if not keep:
            return {}, skipped
        rows = [[row[t] for t in keep] for row in rows]
        ig = exact_information_gain(rows[1:], rows[0])
        out = {}
        for entry, value in zip(cache, ig, strict=True):
            entry.ig_exact, entry.ig_step = value, step
            out[entry.skill_id] = value
        return out, skipped

    def _ig_context(self, messages, doc, extra_info=None) -> list[int]:
        """The token context a trace follows, in the prompt the agent loop builds (its tools included,
        :meth:`_scoring_context`), with the skill where the loop puts it: in the user turn
        (``SKILL:{json}`` line before the question), or with ``train_manager`` at the start of the
        assistant turn (chat(query) + ``SKILL:`` + the scored skill tokens + ``\\n``)."""
        sel = self.arise.selection
        context = self._scoring_context(extra_info)
        if doc is None:
            return context.chat_ids(messages)
        if not sel.train_manager:
            return context.chat_ids(inject_skill(messages, doc))
        prefix = context.prefix(messages, scoring_suffix(True))
        skill_ids = truncate_skill_for_scoring(doc.to_json(), self.tokenizer, sel.max_skill_tokens)
        return prefix + skill_ids + list(self.tokenizer.encode("\n", add_special_tokens=False))


# bytes per prompt-logit vLLM's V1 runner holds for a request (gpu_model_runner._get_prompt_logprobs_dict:
# the model-dtype logits of the request's prompt chunk, then compute_logprobs' fp32 log-softmax), outside
# the memory it profiled at start-up
LOGIT_BYTES = 2 + 4


def ig_request_tokens(max_logits_mb: int, tokenizer) -> int:
    """The most tokens (context + trace) one exact-IG request may hold so that the engine's prompt
    logits stay within ``max_logits_mb`` MiB; 0 = no bound (a very large number)."""
    if not max_logits_mb:
        return 1 << 62
    vocab = max(len(tokenizer), int(getattr(tokenizer, "vocab_size", 0) or 0))
    return max(1, (int(max_logits_mb) << 20) // (vocab * LOGIT_BYTES))


def _logprob_sum(output, lo: int, hi: int) -> float | None:
    """The summed prompt log-probs of tokens ``lo..hi-1`` of one scoring output; None where the
    engine's answer lacks them (a failed request, no or short ``prompt_logprobs``, a None entry)."""
    if isinstance(output, BaseException):
        return None
    lp = (getattr(output, "extra_fields", None) or {}).get("prompt_logprobs")
    try:
        return float(sum(lp[j - 1][0] for j in range(lo, hi)))
    except (TypeError, IndexError, KeyError, ValueError):
        return None


def _unaided_trace(group: dict[str, Any]) -> list[int] | None:
    """The token ids of a query group's best correct unaided trace, or None."""
    unaided = group.get("unaided")
    if unaided is None:  # a group built without that list: its unaided tau+ traces
        unaided = [t for t in group.get("traces", []) if not t.get("skill_id")]
    return list(unaided[0]["ids"]) if unaided else None


def _last_user_turn(messages) -> str:
    for message in reversed(list(messages or [])):
        if isinstance(message, dict) and message.get("role") == "user":
            return str(message.get("content", ""))
    return ""
