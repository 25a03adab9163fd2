"""What the streamed summary rollouts (``arise.summary.stream``) rely on in verl, on both stacks
(conftest.py) (recipe/arise/adapters/trainer.py ``on_sample_begin``/``_streamed_summaries``,
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

Run here on the stack's own classes with Ray replaced by in-process stand-ins (no actor starts):
verl's ``PPOTrainer._step_once`` on the composed ``ppo_trainer`` config up to its reward step,
``AgentLoopWorker._run_agent_loop`` on two trajectories of a fake agent loop, ``RewardLoopManager``
and ``AgentLoopManager`` making their actors. That Ray keeps an async actor's event loop running
between calls is Ray's documented behaviour, not exercised here. The whole path runs end to end in
tests/e2e/test_cpu_e2e.py (the resumed Phase II streams).
"""

import json

import pytest

PROBE = r"""
import asyncio, inspect, json, time, types
import cloudpickle
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast
from verl.experimental.agent_loop import agent_loop as al
from verl.experimental.agent_loop.agent_loop import AgentLoopManager, AgentLoopMetrics, AgentLoopOutput, AgentLoopWorker
from verl.experimental.reward_loop import reward_loop as rl
from verl.trainer.ppo.v1 import trainer_base as tb
from verl.workers.rollout.llm_server import LLMServerClient

with initialize_config_module("verl.trainer.config", version_base=None):
    config = compose("ppo_trainer")
out = {}

# 1. _step_once: the hooks around sample(), inside the "gen" timer
events = []
class Stop(Exception):
    pass
class Trainer(tb.PPOTrainer):
    def on_sample_begin(self):
        events.append("on_sample_begin")
        time.sleep(0.1)
    def on_sample_end(self):
        events.append("on_sample_end")
        time.sleep(0.1)
Trainer.__abstractmethods__ = frozenset()
trainer = Trainer(config)
class Buffer:
    def sample(self, **kwargs):
        events.append(f"sample {sorted(kwargs.items())}")
        return types.SimpleNamespace(extra_info={}), {}
class RewardStep:  # _step_once's next step: stop there
    @property
    def reward_loop_worker_handles(self):
        events.append("reward step")
        raise Stop
trainer.replay_buffer, trainer.global_steps, trainer.reward_loop_manager = Buffer(), 3, RewardStep()
timing = {}
try:
    trainer._step_once({}, timing, 4)
except Stop:
    pass
out["step_events"], out["gen_s"] = events, timing.get("gen")

# 2. AgentLoopWorker: each trajectory's reward as soon as its agent loop finishes
class Remote:
    def __init__(self, fn):
        self.fn = fn
    def remote(self, *args, **kwargs):
        return self.fn(*args, **kwargs)
class Handle:
    def __init__(self, obj):
        self.obj = obj
    def __getattr__(self, name):
        return Remote(getattr(self.obj, name))

order = []
class RewardWorker:
    def __init__(self):
        self.first_scored = asyncio.Event()
    async def compute_score(self, data):
        order.append(f"score {data.non_tensor_batch['name'][0]}")
        self.first_scored.set()
        return {"reward_score": 1.0, "reward_extra_info": {}}
reward_worker = RewardWorker()

class FakeLoop:
    def __init__(self, **kwargs):
        pass
    async def run(self, sampling_params, name, **kwargs):
        if name == "slow":  # still generating until the fast trajectory's reward is in
            await asyncio.wait_for(reward_worker.first_scored.wait(), 10)
        order.append(f"finished {name}")
        return AgentLoopOutput(prompt_ids=[1, 2], response_ids=[3], response_mask=[1], metrics=AgentLoopMetrics())
al._agent_loop_registry["fake_loop"] = OmegaConf.create({"_target_": "__main__.FakeLoop"})

vocab = {"<pad>": 0, "a": 1, "b": 2, "c": 3}
tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel(vocab, "<pad>")), pad_token="<pad>")
worker = AgentLoopWorker.__new__(AgentLoopWorker)  # the attributes __init__ would set from a model folder
worker.config, worker.llm_client, worker.tokenizer, worker.processor = config, None, tokenizer, None
worker.hf_model_type, worker.dataset_cls, worker.tools, worker.mm_processor_kwargs = None, None, [], {}
worker.rollout_config = types.SimpleNamespace(prompt_length=4, response_length=4)
worker.distillation_enabled = False
worker.reward_loop_worker_handles = [Handle(reward_worker)]

async def two_trajectories():
    def one(i, name):
        trajectory = {"step": 1, "sample_index": i, "rollout_n": 0, "validate": False}
        return worker._run_agent_loop({}, trajectory, agent_name="fake_loop", name=name, raw_prompt=[])
    return await asyncio.gather(one(0, "slow"), one(1, "fast"))
results = asyncio.run(two_trajectories())
out["trajectory_order"] = order
out["reward_scores"] = [r.reward_score for r in results]

# 3. RewardLoopManager: the reward workers are Ray actors of RewardLoopWorker, whose compute_score is a coroutine
made = []
class ActorClass:
    def __init__(self, cls):
        self.cls = cls
    def options(self, **kwargs):
        return self
    def remote(self, *args):
        made.append((self.cls.__name__, args))
        return f"{self.cls.__name__} actor"
fake_ray = types.SimpleNamespace(
    remote=ActorClass,
    nodes=lambda: [{"NodeID": "node", "Alive": True, "Resources": {"CPU": 1.0}}],
    util=types.SimpleNamespace(scheduling_strategies=types.SimpleNamespace(
        NodeAffinitySchedulingStrategy=lambda **kwargs: kwargs)),
)
rl.ray = fake_ray
manager = rl.RewardLoopManager(config)
out["reward_actors"] = sorted({name for name, _ in made})
out["streaming_handles"] = manager.reward_loop_worker_handles == manager.reward_loop_workers
out["compute_score_is_async"] = inspect.iscoroutinefunction(rl.RewardLoopWorker.compute_score)

# ... and awaits the reward manager's run_single in its own (the actor's) event loop, where the tasks
# run_single starts (the summary stream) go on after it returns
async def score_on_a_worker():
    started = []
    class RewardManager:
        async def run_single(self, data):
            started.append(asyncio.get_running_loop().create_task(asyncio.sleep(0.01, "summary done")))
            return {"reward_score": 0.0}
    reward = rl.RewardLoopWorker.__new__(rl.RewardLoopWorker)
    reward.config, reward.reward_manager = config, RewardManager()
    await reward.compute_score("one trajectory")
    return await started[0]
out["run_single_task_on_the_callers_loop"] = asyncio.run(score_on_a_worker())

# 4. AgentLoopManager hands the LLM client to each agent-loop worker actor; the client holds only
#    its config and the balancer's handle
made.clear()
al.ray = fake_ray
client = LLMServerClient(config, "load balancer handle")
out["client_attributes"] = sorted(vars(client))
out["client_round_trip"] = type(cloudpickle.loads(cloudpickle.dumps(client))).__name__
agent_manager = AgentLoopManager(config, client, None, ["reward actor"])
asyncio.run(agent_manager._init_agent_loop_workers())
out["agent_actors"] = [(name, args[1] is client) for name, args in made]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def stream(stack):
    return json.loads(stack.run(PROBE).strip().splitlines()[-1])


def test_the_trainer_brackets_each_sampled_batch_with_the_sample_hooks(stream):
    assert stream["step_events"] == [
        "on_sample_begin",
        "sample [('batch_size', 4), ('global_steps', 3), ('partition_id', 'train')]",
        "on_sample_end",
        "reward step",
    ], "verl's _step_once no longer calls on_sample_begin / sample / on_sample_end in this order"
    assert stream["gen_s"] >= 0.2  # both hooks' sleeps inside the "gen" timer


def test_rewards_are_computed_per_trajectory_on_reward_loop_workers(stream):
    # the fast trajectory's reward arrives while the slow one still generates
    assert stream["trajectory_order"] == ["finished fast", "score fast", "finished slow", "score slow"]
    assert stream["reward_scores"] == [1.0, 1.0]


def test_the_reward_loop_worker_is_an_async_actor(stream):
    assert stream["reward_actors"] == ["RewardLoopWorker"]
    assert stream["streaming_handles"]  # rule-based rewards: the agent loop gets the workers' handles
    assert stream["compute_score_is_async"]  # Ray makes an actor with a coroutine method an async actor
    assert stream["run_single_task_on_the_callers_loop"] == "summary done"


def test_the_llm_client_is_handed_to_ray_actors_by_verl_itself(stream):
    assert stream["agent_actors"] and all(a == ["AgentLoopWorker", True] for a in stream["agent_actors"])
    assert stream["client_attributes"] == [
        "_lb_require_acquire_fields",
        "_lb_require_release_fields",
        "_load_balancer",
        "config",
    ]
    assert stream["client_round_trip"] == "LLMServerClient"
