"""ARISE (Agent Reasoning with Intrinsic Skill Evolution) as a verl recipe.

The framework-free core lives in skill, library, selection, reward and prompts; the
verl adapters import verl lazily so the core stays usable and testable without it.
"""
