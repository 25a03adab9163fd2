"""A Python file that is not in a package (bench/, scripts/, a test module) loaded as a module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_file(path: Path, name: str) -> ModuleType:
    """``path`` executed as the module ``name``, registered in ``sys.modules`` (dataclasses look
    their module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
