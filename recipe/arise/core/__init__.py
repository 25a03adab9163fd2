"""The paper's method, framework free: skills, the two-tier library, selection, scoring, the reward.

Nothing here imports verl, Ray, torch, vLLM or transformers (tests/test_layout.py checks it), so
every piece runs and is tested alone. The verl adapters (``recipe.arise.adapters``) and the user
tools (``recipe.arise.tools``) build on it.
"""
