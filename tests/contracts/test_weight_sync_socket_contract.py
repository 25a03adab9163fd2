"""What the launch's own weight-sync socket (recipe/arise/adapters/weight_sync_socket.py) relies on in
verl, on both stacks (conftest.py), run on the stack's own code (nothing started):

- verl names the colocated weight-sync socket after the Ray job id alone on both sides: the sender
  (``ServerAdapter.__init__``, from Ray) and the receiver (``vLLMColocateWorkerExtension._get_zmq_handle``,
  from ``VERL_RAY_JOB_ID`` at each call), so two launches whose job ids agree (every fresh local Ray
  cluster's first driver: ``01000000``, tests/adapters/test_weight_sync_socket.py) share one socket;
- verl's vLLM server sets ``VERL_RAY_JOB_ID`` before it starts its engine, whose workers are processes
  of their own (``distributed_executor_backend: mp``): ARISE's vLLM plugin, loaded in each of them,
  sees the variable and tags it before any sync;
- verl's rollout registry resolves the vLLM adapter through ``_ROLLOUT_REGISTRY``, so ARISE's adapter is
  the one built.

With ARISE's two sides, the sender and the receiver of a launch name one socket, two launches two.
"""

import json
import re

import pytest

JOB = "01000000"
PROBE = r"""
import json, os, types
import ray
from recipe.arise.adapters import weight_sync_socket
from recipe.arise.adapters.rollout_adapter import ARISEServerAdapter
from recipe.arise.cpu import vllm_plugin
from verl.workers.rollout.base import get_rollout_class
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
from verl.workers.rollout.vllm_rollout.vllm_rollout import ServerAdapter

JOB = "01000000"  # every fresh local Ray cluster's first driver
ray.get_runtime_context = lambda: types.SimpleNamespace(get_job_id=lambda: JOB)  # no cluster here
os.environ.update(RANK="0", RAY_LOCAL_WORLD_SIZE="1")
config = types.SimpleNamespace(tensor_model_parallel_size=1, disaggregation=None, data_parallel_size=1,
                               pipeline_model_parallel_size=1, layered_summon=False)

def tag(value):
    os.environ.pop("ARISE_RUN_TAG", None)
    if value is not None:
        os.environ["ARISE_RUN_TAG"] = value

def sender(cls, value):
    tag(value)
    return cls(config, types.SimpleNamespace(), None, replica_rank=1).zmq_handle

def receiver(value, plugin=True):
    tag(value)
    os.environ.update(VERL_RAY_JOB_ID=JOB, VERL_REPLICA_RANK="1")  # as verl's server leaves them to its engine
    if plugin:
        vllm_plugin.register()  # what vLLM runs in each of its processes
    worker = types.SimpleNamespace(local_rank=0, model_runner=types.SimpleNamespace(vllm_config=None))
    return vLLMColocateWorkerExtension._get_zmq_handle(worker)

weight_sync_socket.register()
out = {
    "verl": [sender(ServerAdapter, None), receiver(None, plugin=False)],
    "a": [sender(ARISEServerAdapter, "111.222"), receiver("111.222")],
    "b": [sender(ARISEServerAdapter, "333.444"), receiver("333.444")],
    "untagged": [sender(ARISEServerAdapter, None), receiver(None)],
    "registry": get_rollout_class("vllm", "async").__name__,
}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def handles(stack):
    env = {"ARISE_CPU": "1"} if stack.name == "cpu" else None
    return json.loads(stack.run(PROBE, env=env).strip().splitlines()[-1])


def test_verl_names_the_socket_after_the_job_id_alone(handles):
    # the bug ARISE fixes: any two launches with job id 01000000 name this one socket
    verl_name = f"ipc:///tmp/rl-colocate-zmq-{JOB}-replica-1-rank-0.sock"
    assert handles["verl"] == [verl_name, verl_name]


def test_a_launchs_sender_and_receiver_agree_and_two_launches_differ(handles):
    a_sender, a_receiver = handles["a"]
    b_sender, b_receiver = handles["b"]
    assert a_sender == a_receiver == f"ipc:///tmp/rl-colocate-zmq-{JOB}-arise-111.222-replica-1-rank-0.sock"
    assert b_sender == b_receiver != a_sender
    assert len(a_sender.removeprefix("ipc://")) < 108  # a Unix socket's path limit (sun_path)


def test_an_untagged_run_keeps_verls_name_on_both_sides(handles):
    assert handles["untagged"] == handles["verl"]


def test_verls_registry_builds_arises_adapter(handles):
    assert handles["registry"] == "ARISEServerAdapter"


def test_verls_server_sets_the_job_id_before_its_engine_starts_its_worker_processes(source):
    server = source("workers/rollout/vllm_rollout/vllm_async_server.py")
    init = server[server.index("class vLLMHttpServer") :]
    init = init[: init.index("\n    def ", init.index("def __init__") + 1)]
    assert re.search(r'os\.environ\["VERL_RAY_JOB_ID"\] = ray\.get_runtime_context\(\)\.get_job_id\(\)', init)
    assert '"distributed_executor_backend": "mp"' in server  # the workers load vLLM's plugins themselves
    utils = source("workers/rollout/vllm_rollout/utils.py")
    method = utils[utils.index("def _get_zmq_handle") :]
    method = method[: method.index("\n    def ")]
    assert 'os.environ.get("VERL_RAY_JOB_ID"' in method  # read at each call, not at import
