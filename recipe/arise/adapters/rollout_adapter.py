"""verl's vLLM server adapter with the launch's own weight-sync socket
(:mod:`recipe.arise.adapters.weight_sync_socket`)."""

from __future__ import annotations

import logging
import os

import ray
from verl.workers.rollout.vllm_rollout.vllm_rollout import ServerAdapter

from recipe.arise.adapters.weight_sync_socket import UNTAGGED, sender_handle
from recipe.arise.core import run_files

logger = logging.getLogger(__name__)
logger.setLevel(os.getenv("VERL_LOGGING_LEVEL", "WARN"))


class ARISEServerAdapter(ServerAdapter):
    """verl's ``ServerAdapter``; its ``zmq_handle`` carries the launch's tag, as the receiver's does."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        tag = run_files.current_tag()
        self.zmq_handle = sender_handle(self.zmq_handle, ray.get_runtime_context().get_job_id(), tag)
        if tag is None:
            logger.warning(UNTAGGED, self.zmq_handle)
        else:  # in the run's log: which socket this launch's weights go through
            print(f"[arise] weight-sync socket {self.zmq_handle}", flush=True)
