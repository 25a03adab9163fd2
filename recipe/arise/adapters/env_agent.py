"""``arise_env_agent``: a multi-turn episode in a text environment, carrying the ARISE skill layer.

One trajectory plays one game (the row's ``extra_info.env``: the environment's name, the game and
the environment's options; docs/environments.md). The skill layer scores and injects a skill into
the row's user turn (the task) exactly as for ``arise_tool_agent`` (:func:`with_skills`); the loop
then resets the environment, appends the first observation to that turn, and per turn generates,
merges the reply (mask 1), parses its ``Action:`` line, steps the environment and appends the
observation as a user turn (mask 0). It stops on ``done``, the turn budget
(``rollout.multi_turn.max_assistant_turns``), ``rollout.response_length`` (which holds every turn)
or ``arise.env.episode_timeout_s``.

The episode's result goes into ``extra_fields["env"]`` (:data:`EXTRA_ENV`): won, turns,
invalid_actions, seconds, task_type, failed, stop, transcript; the reward manager scores it and the
trainer logs it (``arise/env_*``). The environment comes from the process's pool
(``recipe.arise.envs.runner.POOL``: a JVM starts once per concurrent episode and is reused), behind
an :class:`EnvRunner`'s time limits (``arise.env.*``); every call runs off the event loop
(:func:`call_env`). An environment that
raises or hangs fails the episode (``failed`` names why, counted in ``arise/env_failed``), never
the run; an error of this loop's own code still raises (``recipe.arise.adapters.rollout_failures``
records it), and a missing package (ImportError) too: every episode would fail.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register
from verl.utils.profiler import simple_timer

from recipe.arise.adapters.skill_layer import arise_config, check_agent_loop, with_skills
from recipe.arise.core import env_prompts
from recipe.arise.envs.base import ENVS, Step
from recipe.arise.envs.runner import CLOSE_WAIT_S, POOL, EnvFailure, EnvRunner

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))

AGENT_NAME = "arise_env_agent"
EXTRA_ENV = "env"  # the episode's result in AgentLoopOutput.extra_fields
CLOSE_MARGIN_S = CLOSE_WAIT_S + 5.0  # past the runner's own limit: the runner closes a hung environment first


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """What the row's ``extra_info`` says of its game."""

    name: str
    game: dict
    options: dict
    task_type: str  # "" when the row has none: the environment names it


def env_spec(extra_info: Any) -> EnvSpec:
    """The row's game from ``extra_info.env`` (a JSON string, or its dict); ValueError naming what is wrong."""
    if not isinstance(extra_info, Mapping) or extra_info.get("env") in (None, ""):
        raise ValueError(
            f"{AGENT_NAME} needs the row's extra_info.env (JSON: name, game, options; docs/environments.md); "
            f"got extra_info={extra_info!r:.200}"
        )
    raw = extra_info["env"]
    try:
        data = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        raise ValueError(f"extra_info.env is not valid JSON ({exc}): {raw!r:.200}") from exc
    if not isinstance(data, Mapping):
        raise ValueError(f"extra_info.env must be a JSON object, got {raw!r:.200}")
    name, game, options = data.get("name"), data.get("game"), data.get("options") or {}
    if name not in ENVS:
        raise ValueError(f"extra_info.env.name {name!r} is no registered environment; registered: {sorted(ENVS)}")
    if not isinstance(game, Mapping) or not isinstance(options, Mapping):
        raise ValueError(f"extra_info.env.game and .options must be objects, got {game!r:.100} and {options!r:.100}")
    return EnvSpec(str(name), dict(game), dict(options), str(extra_info.get("task_type") or ""))


async def call_env(fn, *args, timeout_s: float, what: str):
    """``fn(*args)`` (a blocking call of :class:`EnvRunner`, which enforces the environment's limits
    and closes a hung or crashed one) in a daemon thread of its own, so a call never holds a worker
    of the executor verl tokenizes in; ``timeout_s`` is a backstop past the runner's limit. Raises
    :class:`EnvFailure` (the runner's own, or on the backstop or any other exception of ``fn``)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(ok: bool, value) -> None:
        if not done.done():  # cancelled by the timeout: the late answer is dropped
            (done.set_result if ok else done.set_exception)(value)

    def target() -> None:
        try:
            answer = (True, fn(*args))
        except BaseException as exc:  # noqa: BLE001  reported to the episode, whatever the environment raised
            answer = (False, exc)
        try:
            loop.call_soon_threadsafe(settle, *answer)
        except RuntimeError:  # the event loop is gone (a call that outlived its timeout): nobody waits
            pass

    threading.Thread(target=target, name=f"arise-env-{what}", daemon=True).start()
    try:
        return await asyncio.wait_for(done, timeout=max(0.0, timeout_s))
    except asyncio.TimeoutError:
        raise EnvFailure(f"{what} did not return within {timeout_s:.1f} s") from None
    except EnvFailure:
        raise
    except Exception as exc:
        raise EnvFailure(f"{what} raised {type(exc).__name__}: {str(exc)[:300]}") from exc


def give_back(runner: EnvRunner, spec: EnvSpec, healthy: bool) -> None:
    """The runner's environment back to the pool: kept for the next episode if ``healthy`` (at
    once, so the episode that takes the freed slot finds it idle), else closed (which may wait on
    the environment: in a daemon thread of its own, off the event loop). A runner that broke has
    closed its environment already."""
    env, runner.env, runner.closed = runner.env, None, True
    if env is None:
        return
    if healthy and not runner.broken:
        POOL.give_back(env, spec.name, spec.options)  # a list append under a lock
    else:
        args, kwargs = (env, spec.name, spec.options), {"healthy": False}
        threading.Thread(target=POOL.give_back, args=args, kwargs=kwargs, daemon=True).start()


_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def env_slots(max_live: int) -> asyncio.Semaphore:
    """The running event loop's slots for live environments (``arise.env.max_live``): verl runs a
    worker's trajectories as tasks of one loop, each episode holding an environment (a JVM) while it
    plays; without a bound a step's episodes would start that many at once."""
    return _SLOTS.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(max_live))


@dataclasses.dataclass
class Episode:
    """The episode's record, as ``extra_fields["env"]`` holds it (:meth:`as_dict`)."""

    task_type: str
    won: bool = False
    turns: int = 0  # the policy's replies
    invalid_actions: int = 0  # replies without an action line, and actions the environment refused
    seconds: float = 0.0  # from the slot on: the environment's start, its calls and the generation
    wait_s: float = 0.0  # waiting for a slot (arise.env.max_live), before the episode's time limits start
    failed: str | None = None  # why the environment failed (timeout, crash); None: it did not
    stop: str = ""  # done | turns | length | time | failed
    lines: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (OBSERVATION | ACTION, text)

    def as_dict(self) -> dict[str, Any]:
        out = {k: v for k, v in dataclasses.asdict(self).items() if k != "lines"}
        # one line per part (core.transcript.env_transcript reads it): an observation's own line breaks are spaces
        out["transcript"] = "\n".join(f"{label}: {' '.join(str(text).split())}" for label, text in self.lines)
        return out


def _refused(step: Step, action: str, admissible: list[str] | None) -> bool:
    """The engine's own verdict where it has one, else membership in the previous admissible list."""
    if step.invalid is not None:
        return bool(step.invalid)
    if admissible is None:
        return False
    return action.strip().lower() not in {a.strip().lower() for a in admissible}


@register(AGENT_NAME)
class ARISEEnvAgentLoop(AgentLoopBase):
    # verl builds one loop per trajectory (AgentLoopWorker._run_agent_loop), passing tools= too
    def __init__(self, *args, tools=None, **kwargs):
        super().__init__(*args, **kwargs)
        cfg = arise_config(self.config)
        check_agent_loop(AGENT_NAME, cfg)
        self.limits = cfg.env
        self.max_turns = self.rollout_config.multi_turn.get("max_assistant_turns", None) or 0  # 0: no budget
        self.response_length = int(self.rollout_config.response_length)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        return await with_skills(self, self._episode, sampling_params, kwargs)

    async def _episode(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        spec = env_spec(kwargs.get("extra_info"))
        waited = time.monotonic()
        async with env_slots(self.limits.max_live):
            return await self._play(spec, time.monotonic() - waited, sampling_params, **kwargs)

    async def _play(self, spec: EnvSpec, wait_s: float, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        started = time.monotonic()
        self.deadline = started + self.limits.episode_timeout_s
        self.episode = Episode(task_type=spec.task_type, wait_s=wait_s)
        self.metrics: dict[str, Any] = {}
        self.prompt_ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] = []
        # the weights' versions the episode was generated with (verl's trainer logs its staleness from
        # them, for every trajectory): the first and last generation's; none: the step's own
        step = kwargs.get("global_steps")
        self.versions = {"min_global_steps": None, "max_global_steps": None, "default": step}
        limits = self.limits
        runner = EnvRunner(
            lambda: POOL.take(spec.name, spec.options),  # an idle environment, else a new one (a JVM start)
            label=spec.name,
            step_timeout_s=limits.step_timeout_s,
            reset_timeout_s=limits.reset_timeout_s,
            episode_timeout_s=self._time_left(),
        )
        healthy = False
        try:
            with simple_timer("tool_calls", self.metrics):
                _, first = await call_env(
                    runner.reset, spec.game, timeout_s=limits.reset_timeout_s + CLOSE_MARGIN_S, what="reset"
                )
                if not self.episode.task_type:
                    kind = await call_env(runner.task_type, spec.game, timeout_s=CLOSE_MARGIN_S, what="task_type")
                    self.episode.task_type = str(kind)
            self.episode.lines.append(("OBSERVATION", first.observation.strip()))
            messages = self._with_first_observation(messages, first)
            self.prompt_ids = await self._first_prompt(messages)
            await self._turns(runner, messages, first.admissible, sampling_params)
            healthy = True
        except EnvFailure as failure:
            if isinstance(failure.__cause__, ImportError):  # the environment's package or Java is missing
                raise failure.__cause__ from None
            self.episode.failed, self.episode.stop, self.episode.won = str(failure), "failed", False
            logger.warning(f"{AGENT_NAME}: the environment failed, the episode counts as failed: {failure}")
        finally:  # an error of this loop's own code leaves it unhealthy: its state is not handed on
            give_back(runner, spec, healthy)
        if not self.prompt_ids:  # the environment failed before the first turn: the row's prompt, no response
            self.prompt_ids = await self.ct_build_initial_tokens(messages)
        self.episode.seconds = time.monotonic() - started
        return self._output()

    async def _first_prompt(self, messages: list[dict]) -> list[int]:
        """The first prompt's tokens. verl would cut an over-long one from the left (the chat header,
        the task, the skill): refused instead, naming the setting (the dataset's length filter saw
        the task alone, not the first observation)."""
        ids = await self.loop.run_in_executor(
            None, lambda: self.continuous_token_builder.build_initial_tokens(messages)
        )
        limit = int(self.rollout_config.prompt_length)
        if len(ids) > limit:
            raise ValueError(
                f"{AGENT_NAME}: the first prompt (the task, the skill and the first observation) has {len(ids)} "
                f"tokens, over actor_rollout_ref.rollout.prompt_length={limit}: raise it, or list fewer actions"
            )
        return list(ids)

    def _time_left(self) -> float:
        return self.deadline - time.monotonic()

    @staticmethod
    def _with_first_observation(messages: list[dict], first: Step) -> list[dict]:
        """The row's last user turn (the task, the skill injected) followed by the first observation."""
        for i in range(len(messages) - 1, -1, -1):
            if messages[i].get("role") == "user":
                content = env_prompts.first_turn(messages[i].get("content", ""), first.observation, first.admissible)
                messages[i] = {**messages[i], "content": content}
                return messages
        raise ValueError(f"{AGENT_NAME}: the row's prompt has no user turn")

    async def _turns(self, runner: EnvRunner, messages: list[dict], admissible, sampling_params: dict) -> None:
        episode, request_id = self.episode, uuid4().hex
        while True:
            room = self.response_length - len(self.mask)
            if self.max_turns and episode.turns >= self.max_turns:
                episode.stop = "turns"
                return
            if room <= 0:
                episode.stop = "length"
                return
            if self._time_left() <= 0:
                episode.stop = "time"
                return
            params = {**sampling_params, "max_tokens": min(int(sampling_params.get("max_tokens", room)), room)}
            with simple_timer("generate_sequences", self.metrics):
                out = await self.server_manager.generate(
                    request_id=request_id, prompt_ids=self.prompt_ids, sampling_params=params
                )
            self._preempted(out)
            self._versions(out)
            await self._merge_reply(list(out.token_ids), out.log_probs)
            episode.turns += 1
            text = await self.loop.run_in_executor(
                None, lambda ids=list(out.token_ids): self.tokenizer.decode(ids, skip_special_tokens=True)
            )
            messages.append({"role": "assistant", "content": text})
            action = env_prompts.parse_action(text)
            if action is None:
                episode.invalid_actions += 1
                episode.lines.append(("ACTION", "(none)"))
                reply = env_prompts.invalid_turn(admissible)
            else:
                episode.lines.append(("ACTION", action))
                if self._time_left() <= 0:
                    episode.stop = "time"
                    return
                with simple_timer("tool_calls", self.metrics):
                    step = await call_env(
                        runner.step, action, timeout_s=self.limits.step_timeout_s + CLOSE_MARGIN_S, what="step"
                    )
                episode.invalid_actions += int(_refused(step, action, admissible))
                episode.lines.append(("OBSERVATION", step.observation.strip()))
                if step.done:
                    episode.won, episode.stop = bool(step.won), "done"
                    return
                admissible = step.admissible if step.admissible is not None else admissible
                reply = env_prompts.observation_turn(step.observation, step.admissible)
            if self.max_turns and episode.turns >= self.max_turns:  # no turn left to read the answer
                episode.stop = "turns"
                return
            if not await self._merge_user_turn(messages, reply):
                episode.stop = "length"
                return

    async def _merge_reply(self, ids: list[int], log_probs) -> None:
        """The policy's reply into the running tokens, mask 1 (verl's Continuous Token merge)."""
        keep = bool(self.logprobs or log_probs)
        merged, mask, logprobs = await self.ct_merge_assistant_token(
            self.prompt_ids, ids, self.mask, self.logprobs if keep else None, assistant_logprobs=log_probs or None
        )
        self.prompt_ids, self.mask = merged.token_ids, mask
        if logprobs is not None:
            self.logprobs = logprobs

    async def _merge_user_turn(self, messages: list[dict], content: str) -> bool:
        """An observation turn into the running tokens, mask 0; False (nothing appended) when it
        would fill ``rollout.response_length``, as verl's tool loop does with a tool answer."""
        previous = list(messages)
        messages.append({"role": "user", "content": content})
        merged, mask, logprobs = await self.ct_merge_context_msg(
            previous, messages, self.prompt_ids, self.mask, self.logprobs or None
        )
        if len(mask) >= self.response_length:
            messages.pop()
            return False
        self.prompt_ids, self.mask = merged.token_ids, mask
        if self.logprobs:
            self.logprobs = logprobs or []
        return True

    def _preempted(self, out) -> None:
        count = getattr(out, "num_preempted", None)
        if self.metrics.get("num_preempted") is None:
            self.metrics["num_preempted"] = count if count is not None else -1
        elif count:
            self.metrics["num_preempted"] += count

    def _versions(self, out) -> None:
        fields = getattr(out, "extra_fields", None) or {}
        if self.versions["min_global_steps"] is None:
            self.versions["min_global_steps"] = fields.get("min_global_steps")
        if fields.get("max_global_steps") is not None:
            self.versions["max_global_steps"] = fields["max_global_steps"]

    def _output(self) -> AgentLoopOutput:
        n = len(self.mask)
        prompt_ids = self.prompt_ids[: len(self.prompt_ids) - n]
        response_ids = self.prompt_ids[len(self.prompt_ids) - n :] if n else []
        cut = self.response_length
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids[:cut],
            response_mask=self.mask[:cut],
            response_logprobs=self.logprobs[:cut] if self.logprobs else None,
            num_turns=2 * self.episode.turns + 1,
            metrics=self.metrics,
            extra_fields={
                **{
                    k: self.versions[k] if self.versions[k] is not None else self.versions["default"]
                    for k in ("min_global_steps", "max_global_steps")
                },  # fmt: skip
                EXTRA_ENV: self.episode.as_dict(),
            },
        )


__all__ = ["AGENT_NAME", "EXTRA_ENV", "ARISEEnvAgentLoop", "EnvFailure", "EnvSpec", "Episode", "call_env", "env_spec"]
