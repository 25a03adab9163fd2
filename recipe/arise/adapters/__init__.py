"""Thin verl adapters around the core: the trainer, the agent loop, the reward manager, the
library's Ray replica and the launch entry points. verl is imported here, never in the core.
"""
