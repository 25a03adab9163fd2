"""The verdict's inputs: a run's metrics (a run folder or metrics files, with the earlier launches'
parts) and what the run's config says (``arise.enable``, trajectories per step). Anything that
cannot be read raises :class:`VerdictInputError`: the verdict's exit status 2, told apart from FAIL."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from recipe.arise.tools.report import find_metrics, metrics_launches, read_metrics


class VerdictInputError(Exception):
    """The metrics could not be read (missing, empty, unparseable): exit status 2, not a FAIL."""


@dataclass
class RunConfig:
    """What the run's config says (None where it does not say)."""

    path: str
    arise_enable: bool | None
    trajectories: int | None  # per step: data.train_batch_size x actor_rollout_ref.rollout.n


def metrics_file(path: str | Path) -> Path:
    """The metrics file of ``path``: the file itself, or a run folder's ``metrics.jsonl`` (its launch
    parts alone when a launch was moved aside and the next one has not logged yet)."""
    path = Path(path)
    if path.is_dir():
        default = path / "metrics.jsonl"
        found = default if metrics_launches(default) else find_metrics(path)
        if found is None:
            raise VerdictInputError(f"{path}: no metrics file (metrics.jsonl or verl's file-tracker *.jsonl)")
        return found
    if not metrics_launches(path):
        raise VerdictInputError(f"{path}: no such metrics file or run folder")
    return path


def load(paths: list[str | Path], launch_only: bool = False) -> dict[int, dict[str, float]]:
    """``{step: {key: value}}`` from metrics files or run folders; VerdictInputError when there is
    no file or no step could be parsed (lines that do not parse are reported on stderr)."""
    metrics: dict[int, dict[str, float]] = {}
    for path in paths:
        file = metrics_file(path)
        try:
            rows, warnings = read_metrics(file, launches=not launch_only)
        except OSError as error:
            raise VerdictInputError(f"{file}: {error}") from error
        for warning in warnings:
            print(f"[verdict] {warning}", file=sys.stderr)
        if not rows:
            why = f"{len(warnings)} unparseable lines" if warnings else "empty"
            raise VerdictInputError(f"{file}: no step logged ({why})")
        metrics.update(rows)
    return metrics


def _config_candidates(folder: Path) -> list[Path]:
    found = [folder / "hydra" / ".hydra" / "config.yaml", folder / ".hydra" / "config.yaml"]
    for root in (folder, folder / "checkpoints"):
        found.append(root / "run_config.yaml")  # the preflight's record of the last launch
        steps = []
        for step_dir in root.glob("global_step_*"):
            n = step_dir.name[len("global_step_") :]
            if n.isdigit() and (step_dir / "arise" / "config.yaml").is_file():
                steps.append((int(n), step_dir / "arise" / "config.yaml"))
        if steps:
            found.append(max(steps)[1])  # the config the last checkpoint was trained with
    return [p for p in found if p.is_file()]


def read_config(path: str | Path) -> RunConfig:
    """``arise.enable`` and the trajectories per step of one config file (hydra's, a checkpoint's)."""
    from omegaconf import OmegaConf

    try:
        cfg = OmegaConf.load(path)
    except Exception as error:  # noqa: BLE001 - yaml and OmegaConf raise many types
        raise VerdictInputError(f"{path}: unreadable config ({type(error).__name__}: {error})") from error

    def get(key):
        return OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)

    enable = get("arise.enable")
    batch, n = get("data.train_batch_size"), get("actor_rollout_ref.rollout.n")
    trajectories = int(batch) * int(n) if isinstance(batch, int) and isinstance(n, int) else None
    return RunConfig(str(path), enable if isinstance(enable, bool) else None, trajectories)


def find_config(paths: list[str | Path]) -> RunConfig | None:
    """The run's config: the newest candidate in the run folder (or the last metrics file's folder)."""
    last = Path(paths[-1])
    candidates = _config_candidates(last if last.is_dir() else last.parent)
    if not candidates:
        return None
    try:
        return read_config(max(candidates, key=lambda p: p.stat().st_mtime))
    except VerdictInputError as error:  # the config only helps: say so, judge the metrics alone
        print(f"[verdict] {error}; judged without it", file=sys.stderr)
        return None
