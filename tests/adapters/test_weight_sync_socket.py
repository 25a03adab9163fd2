"""Each launch's own weight-sync socket (recipe/arise/adapters/weight_sync_socket.py).

Why it is needed, on the installed Ray: two fresh local Ray clusters started at once (two launches on
one host) give their drivers the same job id, the one verl names the socket after; and a variable of
the driver's environment (the launcher's ``ARISE_RUN_TAG``) reaches the cluster's workers, where verl's
sender and vLLM run. Both sides on verl's own code: tests/contracts/test_weight_sync_socket_contract.py.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from recipe.arise.adapters import weight_sync_socket as wss

REPO = Path(__file__).resolve().parents[2]
RAY_PROBE = r"""
import json, os, ray
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
@ray.remote(num_cpus=0)
def worker():
    return ray.get_runtime_context().get_job_id(), os.environ.get("ARISE_RUN_TAG")
print(json.dumps([ray.get_runtime_context().get_job_id(), *ray.get(worker.remote())]))
ray.shutdown()
"""


@pytest.fixture
def ray_tmp():
    path = tempfile.mkdtemp(prefix="arise-ray-", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_two_fresh_local_ray_clusters_give_one_job_id_and_the_drivers_tag_reaches_the_workers(ray_tmp):
    procs = []
    for tag in ("111.222", "333.444"):  # at once, as two launches on one host
        env = {**os.environ, "ARISE_RUN_TAG": tag, "RAY_TMPDIR": f"{ray_tmp}/{tag}"}
        env.pop("RAY_ADDRESS", None)  # a fresh local cluster each
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", RAY_PROBE],
                env=env,
                cwd=REPO,
                text=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        )
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    (job_a, worker_job_a, tag_a), (job_b, worker_job_b, tag_b) = results
    assert job_a == job_b == worker_job_a == worker_job_b == "01000000"  # verl's socket names would agree
    assert (tag_a, tag_b) == ("111.222", "333.444")  # each launch's workers know their own launch


def test_the_job_id_gets_the_launchs_tag_once():
    assert wss.launch_job_id("01000000", "12.34") == "01000000-arise-12.34"
    assert wss.launch_job_id("01000000-arise-12.34", "12.34") == "01000000-arise-12.34"
    assert wss.launch_job_id("01000000", None) == "01000000"


def test_the_senders_name_is_the_receivers():
    verl = "ipc:///tmp/rl-colocate-zmq-01000000-replica-0-rank-1.sock"
    tagged = "ipc:///tmp/rl-colocate-zmq-01000000-arise-12.34-replica-0-rank-1.sock"
    assert wss.sender_handle(verl, "01000000", "12.34") == tagged
    assert wss.sender_handle(verl, "01000000", None) == verl


def test_a_name_verl_builds_otherwise_is_refused_naming_it():
    with pytest.raises(RuntimeError, match="rl-colocate-zmq-replica-0-rank-1.*verl changed"):
        wss.sender_handle("ipc:///tmp/rl-colocate-zmq-replica-0-rank-1.sock", "01000000", "12.34")


@pytest.mark.parametrize(
    ("tag", "job_id", "expected"),
    [
        ("12.34", "01000000", "01000000-arise-12.34"),  # a vLLM process of a tagged launch
        ("12.34", "01000000-arise-12.34", "01000000-arise-12.34"),  # its worker, inheriting the tagged id
        (None, "01000000", "01000000"),  # no launcher: verl's name on both sides
        ("12.34", None, None),  # a vLLM process verl did not start: nothing set
    ],
)
def test_the_receivers_job_id(monkeypatch, tag, job_id, expected):
    environ = {} if job_id is None else {wss.JOB_ENV: job_id}
    monkeypatch.delenv("ARISE_RUN_TAG", raising=False)
    if tag is not None:
        monkeypatch.setenv("ARISE_RUN_TAG", tag)
    wss.tag_receiver_job_id(environ)
    assert environ.get(wss.JOB_ENV) == expected


def test_both_sides_are_wired_where_verl_and_vllm_load_arise():
    register = (REPO / "recipe/arise/adapters/verl_register.py").read_text()
    assert "\nweight_sync_socket.register()\n" in register  # every process that imports verl
    plugin = (REPO / "recipe/arise/cpu/vllm_plugin.py").read_text()
    assert "    tag_receiver_job_id()\n" in plugin  # every vLLM process, GPU included
