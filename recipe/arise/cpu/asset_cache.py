"""The content-keyed cache of built CPU assets (``$ARISE_CACHE`` or ``~/.cache/arise``): the tiny
model of the e2e runs (:mod:`recipe.arise.cpu.tiny`) and the learning-effect world
(:mod:`recipe.arise.cpu.world`)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path


def cache_root(root: str | os.PathLike | None = None) -> Path:
    return Path(root or os.environ.get("ARISE_CACHE") or Path.home() / ".cache" / "arise")


@contextlib.contextmanager
def _no_progress_bars():
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def build_cached(target: Path, build) -> Path:
    """``target`` once it holds ``tiny_assets.json``; else ``build(folder)`` (which writes that file)
    runs in a temp folder beside it that is then renamed, so a half-built folder is never reused."""
    if (target / "tiny_assets.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        with _no_progress_bars():  # save_pretrained's "Writing model shards" bar: noise in the run's console
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


def asset_dirs(out_dir: str | os.PathLike) -> tuple[Path, Path, Path]:
    """``out_dir`` and its ``model/`` and ``data/`` folders, created."""
    out = Path(out_dir)
    for folder in (out / "model", out / "data"):
        folder.mkdir(parents=True, exist_ok=True)
    return out, out / "model", out / "data"


@contextlib.contextmanager
def one_torch_thread():
    """torch on one thread for the block (as tiny.build_tiny_assets: tiny matrices, shared cores)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def write_info(out: Path, started: float, loss: float, **fields) -> dict:
    """The built assets' summary (model and data paths, ``fields``, loss, build time), written to
    ``out/tiny_assets.json`` and returned."""
    paths = {"model": str(out / "model"), "train": str(out / "data" / "train.parquet")}
    paths["val"] = str(out / "data" / "val.parquet")
    info = {**paths, **fields, "warm_start_loss": round(loss, 4), "seconds": round(time.time() - started, 1)}
    (out / "tiny_assets.json").write_text(json.dumps(info, indent=2))
    return info


def build_cached_assets(target: Path, build_assets) -> Path:
    """``build_cached`` with ``build_assets(folder)``, its returned summary written (as strings) to
    ``tiny_assets.json``."""
    return build_cached(
        target,
        lambda folder: (folder / "tiny_assets.json").write_text(
            json.dumps({k: str(v) for k, v in build_assets(folder).items()}, indent=2)
        ),
    )


def variant_main(argv, doc: str, build_assets, cached_assets, sft_steps: int) -> None:
    """The command line of a tiny-asset variant (tiny_tool, tiny_env): build into OUT_DIR, or
    print the cached assets' folder (``--cached``), building it if needed."""
    import argparse

    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", nargs="?", help="build here; omit with --cached")
    parser.add_argument("--cached", action="store_true", help="print the assets' folder in the cache, building it")
    parser.add_argument("--sft-steps", type=int, default=sft_steps)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not (args.cached or args.out_dir):
        parser.error("out_dir is required unless --cached")
    built = None if args.cached else build_assets(args.out_dir, sft_steps=args.sft_steps, seed=args.seed)
    print(cached_assets() if args.cached else json.dumps(built, indent=2))
