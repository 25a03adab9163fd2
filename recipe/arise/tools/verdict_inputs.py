"""The verdict's inputs: a run's metrics (a run folder or metrics files, with the earlier launches'
parts) and what the run's config says (``arise.enable``; ``trainer.device``, the run's scale). Anything that
cannot be read raises :class:`VerdictInputError`: the verdict's exit status 2, told apart from FAIL."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from recipe.arise.tools.report import find_metrics, metrics_launches, read_metrics

# arise/* keys the trainer logs with ARISE on or off (rows dropped at load, the python tool, failed and
# refilled groups, groups re-issued on resume, environment episodes): no sign of ARISE
RUN_KEYS = frozenset(
    (
        "arise/rows_dropped",
        "arise/val_rows_dropped",
        "arise/tool_calls",
        "arise/tool_error_rate",
        "arise/tool_s",
        "arise/tool_calls_malformed",
        "arise/rollout_failures",
        "arise/rollout_dropped",
        "arise/val_rollout_failures",
        "arise/refilled_groups",
        "arise/reissued_groups",
        "arise/reissued_observations_dropped",
        "arise/env_success",
        "arise/env_turns",
        "arise/env_invalid_actions",
        "arise/env_s",
        "arise/env_wait_s",
        "arise/env_failed",
    )
)
RUN_KEY_PREFIXES = ("arise/env_success/",)  # per task type, also logged with ARISE off


def is_run_key(key: str) -> bool:
    """An arise/* key the trainer logs with ARISE on or off (no sign of ARISE)."""
    return key in RUN_KEYS or key.startswith(RUN_KEY_PREFIXES)


class VerdictInputError(Exception):
    """The metrics could not be read (missing, empty, unparseable): exit status 2, not a FAIL."""


@dataclass
class RunConfig:
    """What the run's config says (None where it does not say)."""

    path: str
    arise_enable: bool | None
    device: str | None  # trainer.device: cpu for the tiny CPU run, cuda on GPUs (the run's scale)


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
    """``arise.enable`` and ``trainer.device`` of one config file (hydra's, a checkpoint's)."""
    from omegaconf import OmegaConf

    try:
        cfg = OmegaConf.load(path)
    except Exception as error:  # noqa: BLE001 - yaml and OmegaConf raise many types
        raise VerdictInputError(f"{path}: unreadable config ({type(error).__name__}: {error})") from error

    def get(key):
        return OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)

    enable, device = get("arise.enable"), get("trainer.device")
    return RunConfig(
        str(path), enable if isinstance(enable, bool) else None, device if isinstance(device, str) else None
    )


# where a run folder holds its config (_config_candidates), for the message when none is there
CONFIG_PLACES = (
    "hydra/.hydra/config.yaml, .hydra/config.yaml, run_config.yaml (the preflight's record of the launch), "
    "global_step_N/arise/config.yaml (a checkpoint's), also under checkpoints/"
)


def config_folder(paths: list[str | Path]) -> Path:
    """The folder the run's config is looked for in: the run folder, or the last metrics file's folder."""
    last = Path(paths[-1])
    return last if last.is_dir() else last.parent


def find_config(paths: list[str | Path]) -> RunConfig | None:
    """The run's config: the newest candidate in the run folder (or the last metrics file's folder)."""
    candidates = _config_candidates(config_folder(paths))
    if not candidates:
        return None
    try:
        return read_config(max(candidates, key=lambda p: p.stat().st_mtime))
    except VerdictInputError as error:  # the config only helps: say so, judge the metrics alone
        print(f"[verdict] {error}; not used", file=sys.stderr)
        return None


def scale_of(config: RunConfig | None, folder: str | Path = "") -> str:
    """The run's scale from its configuration, as its launch knew it: ``tiny`` for a CPU run
    (``trainer.device=cpu``: the CPU smoke run, whose launch asks for ``--scale tiny``), ``gpu`` on
    GPUs (``gpu_check.sh`` asks for ``--scale gpu``). Never from the metrics: dynamic sampling's refills
    lift a step's trajectory count above the configured batch. VerdictInputError when no config says."""
    if config is None:
        where = f" in {folder}" if folder else ""
        raise VerdictInputError(
            f"no readable run config{where} (looked for {CONFIG_PLACES}): --scale auto takes the run's scale "
            "from it; pass --config <the run's config.yaml>, or --scale tiny|gpu"
        )
    if config.device is None:
        raise VerdictInputError(
            f"{config.path}: no trainer.device, which --scale auto reads (cpu: tiny, else gpu); "
            "pass --scale tiny|gpu, or --config <the run's full config.yaml>"
        )
    return "tiny" if config.device == "cpu" else "gpu"
