"""Registers ARISE's verl components in the importing process.

verl imports the modules listed in ``VERL_USE_EXTERNAL_MODULES`` on ``import verl`` in every
process (driver, TaskRunner, agent-loop and reward workers); ``arise_trainer.yaml`` sets it in
Ray's runtime env so the ARISE trainers ("arise", "arise_colocate_async", "arise_separate_async")
and the "arise_agent", "arise_tool_agent" and "arise_env_agent" agent loops are found by name.
It also makes ARISE's warnings visible in each of those processes (:func:`show_warnings`), and has
verl build ARISE's vLLM server adapter, whose weight-sync socket is the launch's own
(:mod:`~recipe.arise.adapters.weight_sync_socket`).
"""

# verl loads external modules before its entry-point plugins; the CPU platform (a no-op unless
# ARISE_CPU=1) must exist before the trainer modules resolve the device.
from recipe.arise.cpu import verl_plugin  # noqa: F401  isort: skip
import logging  # noqa: E402
import sys  # noqa: E402

from recipe.arise.adapters import agent_loop, env_agent, tool_agent, trainers, weight_sync_socket  # noqa: F401,E402

ARISE_LOGGER = "recipe.arise"


class ConsoleWarnings(logging.Handler):
    """ARISE's warnings on the process's stderr (Ray forwards a worker's to the run's log) where no
    handler on the way to the root prints them to a console: a process with no such handler (a Ray
    worker whose root has only a NullHandler, or none and ``logging.lastResort`` off) would drop them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.setFormatter(logging.Formatter("%(levelname)s %(asctime)s %(name)s: %(message)s"))

    def _printed_elsewhere(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            for h in logger.handlers:
                if h is not self and record.levelno >= h.level and type(h) is not logging.NullHandler:
                    if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                        return True
            logger = logger.parent if logger.propagate else None
        return False

    def emit(self, record: logging.LogRecord) -> None:
        if self._printed_elsewhere(record):
            return
        try:  # the current sys.stderr: Ray replaces it in its workers
            sys.stderr.write(self.format(record) + "\n")
            sys.stderr.flush()
        except Exception:
            self.handleError(record)


def show_warnings() -> None:
    """Make ARISE's warnings visible in this process (idempotent): the ``recipe.arise`` logger gets a
    :class:`ConsoleWarnings` handler, and no ARISE module logger stays above WARNING (their level comes
    from ``VERL_LOGGING_LEVEL``, which is meant to add verl's detail, not to hide ARISE's warnings)."""
    root = logging.getLogger(ARISE_LOGGER)
    if not any(isinstance(h, ConsoleWarnings) for h in root.handlers):
        root.addHandler(ConsoleWarnings())
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if name.startswith(ARISE_LOGGER) and isinstance(logger, logging.Logger) and logger.level > logging.WARNING:
            logger.setLevel(logging.WARNING)


show_warnings()
weight_sync_socket.register()
