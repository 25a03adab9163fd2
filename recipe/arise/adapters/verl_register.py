"""Registers ARISE's verl components in the importing process.

verl imports the modules listed in ``VERL_USE_EXTERNAL_MODULES`` on ``import verl`` in every
process (driver, TaskRunner, agent-loop and reward workers); ``arise_trainer.yaml`` sets it in
Ray's runtime env so the "arise" trainer and the "arise_agent" agent loop are found by name.
"""

# verl loads external modules before its entry-point plugins; the CPU platform (a no-op unless
# ARISE_CPU=1) must exist before the trainer modules resolve the device.
from recipe.arise.cpu import verl_plugin  # noqa: F401  isort: skip
from recipe.arise.adapters import agent_loop, trainer  # noqa: F401,E402  (registration side effects)
