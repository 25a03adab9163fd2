"""The content-keyed cache of built CPU assets (``$ARISE_CACHE`` or ``~/.cache/arise``): the tiny
model of the e2e runs (:mod:`recipe.arise.cpu.tiny`) and the learning-effect world
(:mod:`recipe.arise.cpu.world`)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path


def cache_root(root: str | os.PathLike | None = None) -> Path:
    return Path(root or os.environ.get("ARISE_CACHE") or Path.home() / ".cache" / "arise")


def build_cached(target: Path, build) -> Path:
    """``target`` once it holds ``tiny_assets.json``; else ``build(folder)`` (which writes that file)
    runs in a temp folder beside it that is then renamed, so a half-built folder is never reused."""
    if (target / "tiny_assets.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        build(tmp)
        info = tmp / "tiny_assets.json"
        info.write_text(info.read_text().replace(str(tmp), str(target)))
        try:
            os.replace(tmp, target)
        except OSError:  # another process finished first: use its copy
            if not (target / "tiny_assets.json").is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target
