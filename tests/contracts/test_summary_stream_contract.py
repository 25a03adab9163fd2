"""What the streamed summary rollouts (``arise.summary.stream``) rely on, read from verl's source
on both stacks (conftest.py) (recipe/arise/adapters/trainer.py ``on_sample_begin``/``_streamed_summaries``,
recipe/arise/adapters/reward_manager.py ``_stream_summary``):

- the v1 trainer calls ``on_sample_begin`` right before it samples (generates) a batch and
  ``on_sample_end`` right after, inside the same ``gen`` timer, so the stream is open for exactly
  one batch's rewards;
- the agent loop scores each trajectory as soon as it finishes, on a reward-loop worker
  (``compute_score.remote``), so a group's G-th reward arrives while other groups still generate;
- ``RewardLoopWorker.compute_score`` is a coroutine: the worker is a Ray async actor whose event
  loop outlives the call, so the summary task the reward manager starts there keeps running;
- ``LLMServerClient`` carries only its config and the load balancer's actor handle (it is handed
  to Ray actors by verl itself), so the trainer can pass it to the reward workers via the pool.

The whole path runs end to end in tests/e2e/test_cpu_e2e.py (the resumed Phase II streams).
"""

import re


def test_the_trainer_brackets_each_sampled_batch_with_the_sample_hooks(source):
    base = source("trainer/ppo/v1/trainer_base.py")
    assert re.search(
        r'with marked_timer\("gen", timing_raw, color="red"\):\s*self\.on_sample_begin\(\)\s*'
        r"batch, off_policy_metrics = self\.replay_buffer\.sample\([^)]*\)[^\n]*\n(?:[^\n]*\n){0,3}?"
        r"\s*self\.on_sample_end\(\)",
        base,
    ), "verl's _step_once no longer calls on_sample_begin / sample / on_sample_end in this order"


def test_rewards_are_computed_per_trajectory_on_reward_loop_workers(source):
    loop = source("experimental/agent_loop/agent_loop.py")
    assert "output: AgentLoopOutput = await agent_loop.run(sampling_params, **kwargs)" in loop
    assert 'return await self._agent_loop_postprocess(output, trajectory["validate"], **kwargs)' in loop
    assert "result = await selected_reward_loop_worker_handle.compute_score.remote(data)" in loop


def test_the_reward_loop_worker_is_an_async_actor(source):
    reward_loop = source("experimental/reward_loop/reward_loop.py")
    assert "async def compute_score(self, data: DataProto) -> dict:" in reward_loop
    assert "self.reward_loop_workers_class = ray.remote(RewardLoopWorker)" in reward_loop


def test_the_llm_client_is_handed_to_ray_actors_by_verl_itself(source):
    loop = source("experimental/agent_loop/agent_loop.py")
    assert re.search(r"\.remote\(\s*self\.config,\s*self\.llm_client,", loop)
    server = source("workers/rollout/llm_server.py")
    init = server[server.index("class LLMServerClient") : server.index("async def _acquire_server")]
    assert set(re.findall(r"self\.(\w+)\s*(?::[^=\n]+)?= ", init)) == {
        "config",
        "_load_balancer",
        "_lb_require_acquire_fields",
        "_lb_require_release_fields",
    }
