"""Project test configuration.

verl's wheel installs a top-level ``tests`` package; this suite has no ``__init__.py`` files and
runs with ``--import-mode=importlib`` (see pyproject.toml) so pytest collects these files.
"""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not (SHARED / "data" / "raw").is_dir():
        pytest.skip(f"shared data not found at {SHARED}")
    return SHARED
