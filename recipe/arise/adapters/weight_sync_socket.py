"""Each launch's own weight-sync socket, so that two runs on one host never exchange weights.

verl 0.9.1 syncs the trainer's weights into its colocated vLLM workers through a ZMQ socket named
after the Ray job id, ``ipc:///tmp/rl-colocate-zmq-{job}-replica-{r}-rank-{k}.sock``. The sender
(``ServerAdapter.__init__``: the job id from Ray) removes any file of that name and binds it; the
receiver (``vLLMColocateWorkerExtension._get_zmq_handle``, in each vLLM worker, at each sync) reads the
job id from ``VERL_RAY_JOB_ID``. Every fresh local Ray cluster gives its driver the job id
``01000000``, so two launches on one host name one socket, and a run's vLLM workers can load the
other run's weights: silently when the two models' shapes agree.

Both sides here add the launch's tag (``ARISE_RUN_TAG``, :mod:`recipe.arise.core.run_files`: the
launcher's pid and start time, unique on the host while it runs, inherited by every process of the
launch, Ray's workers and vLLM's included) to the job id:

- the sender is :class:`~recipe.arise.adapters.rollout_adapter.ARISEServerAdapter`, the class verl's
  rollout registry names for vLLM (:func:`register`, run by ``verl_register`` in every process);
- the receiver's ``VERL_RAY_JOB_ID`` gets the tag in every vLLM process (:func:`tag_receiver_job_id`,
  run by ARISE's vLLM plugin, which vLLM loads in each worker before the worker syncs weights).

A run started without the launcher has no tag: both sides keep verl's name and the sender warns.
"""

from __future__ import annotations

import os

from recipe.arise.core import run_files

JOB_ENV = "VERL_RAY_JOB_ID"  # what verl's receiver reads; vllm_async_server.py sets it from Ray
PREFIX = "ipc:///tmp/rl-colocate-zmq-"  # verl's name: PREFIX + f"{job}-replica-{r}-rank-{k}.sock"
VLLM_ROLLOUT = ("vllm", "async")  # the key of verl's rollout registry ARISE replaces
SENDER_CLASS = "recipe.arise.adapters.rollout_adapter.ARISEServerAdapter"
UNTAGGED = (
    "no ARISE_RUN_TAG (not started through recipe.arise.tools.launch): the weight-sync socket is verl's "
    "%s, which every other such run on this host names too (each fresh Ray cluster's job id is 01000000); "
    "start runs through run_scripts/ or recipe.arise.tools.launch"
)


def launch_job_id(job_id: str, tag: str | None) -> str:
    """The job id with the launch's tag (unchanged without one; idempotent)."""
    if tag is None:
        return job_id
    suffix = f"-arise-{tag}"
    return job_id if job_id.endswith(suffix) else job_id + suffix


def sender_handle(handle: str, job_id: str, tag: str | None) -> str:
    """verl's sender ``handle`` (of ``job_id``) with the tagged job id, as the receiver names it."""
    head = f"{PREFIX}{job_id}-replica-"
    if not handle.startswith(head):
        raise RuntimeError(
            f"verl's weight-sync socket {handle!r} does not read {head}...: verl changed how it names it, "
            "so ARISE cannot make it the launch's own (recipe/arise/adapters/weight_sync_socket.py)"
        )
    return f"{PREFIX}{launch_job_id(job_id, tag)}-replica-{handle[len(head) :]}"


def tag_receiver_job_id(environ=os.environ) -> None:
    """In a vLLM process verl started (``VERL_RAY_JOB_ID`` set) of a tagged launch: the tagged job id."""
    tag, job_id = run_files.current_tag(), environ.get(JOB_ENV)
    if tag is not None and job_id is not None:
        environ[JOB_ENV] = launch_job_id(job_id, tag)


def register() -> None:
    """verl's rollout registry names ARISE's vLLM server adapter (imported only where verl builds one)."""
    from verl.workers.rollout import base

    base._ROLLOUT_REGISTRY[VLLM_ROLLOUT] = SENDER_CLASS
