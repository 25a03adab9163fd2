"""ARISE (Agent Reasoning with Intrinsic Skill Evolution) as a verl recipe.

- ``core``: the paper's method, framework free (skill, library, selection, scoring, reward, ...).
- ``adapters``: the verl trainer, agent loop and reward manager around the core.
- ``tools``: command-line tools (preflight, calibrate, evaluate, inspect_run, report, verdict).
- ``data_prep``: dataset preparation; ``cpu``: the CPU platform and the tiny test model.
"""
