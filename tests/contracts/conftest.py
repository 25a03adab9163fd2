"""The contract tests read the installed verl / vLLM sources they pin down."""

import importlib.util
from pathlib import Path

import pytest


@pytest.fixture
def source():
    """``source(relative, package="verl")``: the text of one file of an installed package (the
    test is skipped where the package is not installed)."""

    def read(relative: str, package: str = "verl") -> str:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            pytest.skip(f"{package} is not installed")
        return (Path(spec.submodule_search_locations[0]) / relative).read_text()

    return read
