"""The preflight's run-folder checks: checkpoint retention, the metrics file, the validation batch,
free disk for the checkpoints kept, the checkpoint a launch resumes and whether its settings match,
and the record of each launch (``run_config.yaml``, ``launches.jsonl``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import zipfile
from pathlib import Path

from recipe.arise.core.store import atomic_write
from recipe.arise.tools.preflight_common import (
    ADAMW_BYTES_PER_PARAM,
    ALLOW_CONFIG_CHANGE,
    HF_BYTES_PER_PARAM,
    MODEL_BYTES_PER_PARAM,
    RESUME_EXEMPT,
    RESUME_KEYS,
    RESUME_SECTIONS,
    RUN_CONFIG,
    STEP_CONFIG,
    Finding,
    GiB,
    on_placeholder,
    select,
)


def _flat(node, prefix: str) -> dict[str, object]:
    """``{dotted.key: value}`` of a config section, interpolations resolved where they resolve."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if not isinstance(node, DictConfig | ListConfig):
        return {prefix: node}
    try:
        data = OmegaConf.to_container(node, resolve=True)
    except Exception:  # an interpolation that needs the whole config: keep it as written
        data = OmegaConf.to_container(node, resolve=False)
    out: dict[str, object] = {}

    def walk(value, key):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{key}.{k}")
        else:
            out[key] = value

    walk(data, prefix)
    return out


def resume_settings(cfg) -> dict[str, object]:
    """The settings a resumed checkpoint must share with this run (RESUME_SECTIONS, RESUME_KEYS)."""
    out: dict[str, object] = {}
    for section in RESUME_SECTIONS:
        node = select(cfg, section)
        if node is not None:
            out.update(_flat(node, section))
    for key in RESUME_KEYS:
        out[key] = _flat(select(cfg, key), key)[key] if select(cfg, key) is not None else None
    return {k: v for k, v in out.items() if not any(k == e or k.startswith(e) for e in RESUME_EXEMPT)}


def setting_changes(saved: dict, now: dict) -> list[str]:
    """``key: old -> new`` for every setting that differs (a key only one side has counts)."""
    missing = object()
    return [
        f"{k}: {saved.get(k, missing) if k in saved else '(unset)'} -> {now[k] if k in now else '(unset)'}"
        for k in sorted(set(saved) | set(now))
        if saved.get(k, missing) != now.get(k, missing)
    ]


def checkpoint_root(cfg) -> Path:
    return Path(os.path.abspath(str(cfg.trainer.default_local_dir)))


def latest_checkpoint(root: str | os.PathLike) -> tuple[int, Path] | None:
    """The step verl's ``resume_mode=auto`` resumes (``latest_checkpointed_iteration.txt``), None for none."""
    tracker = Path(root) / "latest_checkpointed_iteration.txt"
    try:
        step = int(tracker.read_text().strip())
    except (OSError, ValueError):
        return None
    folder = Path(root) / f"global_step_{step}"
    return (step, folder) if folder.is_dir() else None


def saved_settings(root: Path, folder: Path) -> tuple[dict | None, str]:
    """The settings the checkpoint was written with: the step's own config (when the trainer saved
    one), else the folder's run_config.yaml (the preflight's record of the last launch)."""
    from omegaconf import OmegaConf

    for path in (folder / STEP_CONFIG, root / RUN_CONFIG):
        if path.is_file():
            try:
                return resume_settings(OmegaConf.load(path)), str(path)
            except Exception as error:  # a damaged record: say so, compare nothing
                return None, f"{path} (unreadable: {type(error).__name__}: {error})"
    return None, ""


TRACKER = "latest_checkpointed_iteration.txt"  # verl's record of the step resume_mode=auto resumes
LIBRARY = Path("arise") / "library.parquet"
GATE = Path("arise") / "gate.json"
PENDING = Path("arise") / "pending_observations.json"  # recipe.arise.adapters.trainer_resume.PENDING_FILE


def _torch_file_problem(path: Path) -> str | None:
    """Why a ``torch.save`` file cannot be loaded, or None. torch writes a zip archive whose directory
    is at its end, so a truncated file fails to open as one without reading the tensors."""
    with open(path, "rb") as f:
        head = f.read(2)
    if head == b"PK":
        try:
            zipfile.ZipFile(path).close()
        except (zipfile.BadZipFile, OSError, ValueError) as error:
            return f"truncated or damaged ({error})"
        return None
    if head[:1] == b"\x80":  # torch's legacy (pickle) format: not checked
        return None
    return "empty" if not head else "not a torch file"


def unreadable_files(folder: Path, arise: bool) -> list[str]:
    """``path: why`` for each file of checkpoint ``folder`` its resume would fail to read: verl's
    ``data.pt`` and ``actor/*.pt`` (opened as archives, tensors not read) and, when the run restores
    ARISE's state (``arise``), ``arise/library.parquet`` (read whole, page checksums verified),
    ``arise/gate.json`` and ``arise/pending_observations.json``; ``arise/config.yaml`` always (the
    preflight compares its settings)."""
    from omegaconf import OmegaConf

    from recipe.arise.core.library import SkillLibrary

    problems = []
    torch_files = [folder / "data.pt"] + sorted((folder / "actor").glob("*.pt"))
    for path in torch_files:
        if path.is_file():
            why = _torch_file_problem(path)
            if why:
                problems.append(f"{path}: {why}")
    if arise and (folder / LIBRARY).is_file():  # the trainer says itself when there is none
        try:
            SkillLibrary.load(folder / LIBRARY)
        except Exception as error:  # LibraryFormatError names the file
            problems.append(str(error))
        if (folder / GATE).is_file():
            try:
                sigma = float(json.loads((folder / GATE).read_text())["sigma"])
                if not 0 < sigma < float("inf"):
                    raise ValueError(f"sigma {sigma}")
            except (OSError, ValueError, TypeError, KeyError) as error:
                problems.append(f"{folder / GATE}: {type(error).__name__}: {error}")
        step = folder.name.removeprefix("global_step_")
        if (folder / PENDING).is_file() and step.isdigit():
            from recipe.arise.adapters.trainer_resume import load_pending_observations

            try:
                load_pending_observations(str(folder / PENDING), int(step))
            except ValueError as error:  # PendingObservationsError names the file
                problems.append(str(error))
    if (folder / STEP_CONFIG).is_file():
        try:
            OmegaConf.load(folder / STEP_CONFIG)
        except Exception as error:
            problems.append(f"{folder / STEP_CONFIG}: {type(error).__name__}: {error}")
    return problems


def last_intact_checkpoint(root: Path, before: int, arise: bool) -> tuple[int, Path] | None:
    """The newest ``global_step_M`` (M < before) with its actor/ (retention removes it) and readable files."""
    steps = []
    for folder in root.glob("global_step_*"):
        suffix = folder.name.removeprefix("global_step_")
        if suffix.isdigit() and int(suffix) < before and (folder / "actor").is_dir():
            steps.append((int(suffix), folder))
    for step, folder in sorted(steps, reverse=True):
        if not unreadable_files(folder, arise):
            return step, folder
    return None


def _resume_fix(root: Path, before: int, arise: bool) -> str:
    good = last_intact_checkpoint(root, before, arise)
    if good is None:
        return (
            f"no earlier intact checkpoint in {root}: trainer.resume_mode=disable (starts from step 0), "
            "or a new run folder (EXPERIMENT=<name> or CKPT_DIR=<dir>)"
        )
    step, folder = good
    # moving the damaged folder aside is not enough: verl's auto resume then finds no folder for the
    # tracker's step and starts from step 0
    return (
        f"resume {folder.name}, the last intact checkpoint: trainer.resume_mode=resume_path "
        f"trainer.resume_from_path={folder} (or `echo {step} > {root / TRACKER}`: the next launches resume it)"
    )


def check_resume(cfg) -> list[Finding]:
    """What this launch resumes, and whether its settings match the checkpoint's."""
    trainer = cfg.trainer
    if trainer.get("val_only", False):
        return []
    root = checkpoint_root(cfg)
    mode = str(trainer.get("resume_mode", "auto"))
    # the trainer restores ARISE's library and gate from the checkpoint (recipe.arise.adapters.trainer)
    arise = bool(select(cfg, "arise.enable", False)) and bool(select(cfg, "arise.library.from_checkpoint", True))
    if mode == "resume_path":
        folder = Path(os.path.abspath(str(trainer.get("resume_from_path") or "")))
        try:
            step = int(folder.name.split("global_step_")[-1])
        except ValueError:
            return [Finding("ERROR", f"trainer.resume_from_path {folder}: not a global_step_N folder")]
    else:
        found = latest_checkpoint(root)
        if mode == "disable":
            if found:
                return [
                    Finding(
                        "INFO",
                        f"trainer.resume_mode=disable: starts from step 0 in {root}, which holds global_step_"
                        f"{found[0]} (its steps are written again)",
                    )
                ]
            return []
        if found is None:
            tracker = root / TRACKER
            if tracker.is_file():  # verl fails on a damaged tracker, and starts from 0 when its folder is gone
                text = tracker.read_text(errors="replace").strip()
                step = int(text) if text.isdigit() else None
                what = f"step {step}, whose folder is missing" if step is not None else f"unreadable ({text[:40]!r})"
                return [
                    Finding(
                        "ERROR",
                        f"checkpoints: verl's {tracker}: {what}",
                        _resume_fix(root, step if step is not None else 1 << 62, arise),
                    )
                ]
            return [Finding("OK", f"checkpoints: {root} holds none, a new run from step 0")]
        step, folder = found
    total = trainer.get("total_training_steps")
    saved, source = saved_settings(root, folder)
    findings = [
        Finding(
            "INFO",
            f"resume: {folder} (step {step} of {total})"
            + (f", written with the settings in {source}" if source else ", whose settings were not recorded"),
        )
    ]
    if folder.is_dir():
        problems = unreadable_files(folder, arise)
        if problems:
            findings.append(
                Finding(
                    "ERROR",
                    f"resume: {folder} is damaged (a crash or a full disk while saving?): " + "; ".join(problems),
                    _resume_fix(folder.parent, step, arise),
                )
            )
    if saved is None:
        return findings
    now = resume_settings(cfg)
    unknown = {k for k, v in now.items() if on_placeholder(v)}  # built at launch: the path is not known yet
    if unknown:
        what = f"resume: {', '.join(sorted(unknown))} not compared (the tiny assets, built at launch)"
        findings.append(Finding("INFO", what))
    keep = lambda settings: {k: v for k, v in settings.items() if k not in unknown}  # noqa: E731
    changes = setting_changes(keep(saved), keep(now))
    if not changes:
        findings.append(Finding("OK", "resume: arise.*, algorithm.*, model, loss and batch settings unchanged"))
        return findings
    allowed = os.environ.get(ALLOW_CONFIG_CHANGE) == "1"
    findings.append(
        Finding(
            "WARNING" if allowed else "ERROR",
            f"resume: {len(changes)} setting(s) differ from the checkpoint's run: " + "; ".join(changes[:12]),
            f"{ALLOW_CONFIG_CHANGE}=1 set: continuing with the new settings"
            if allowed
            else f"a new run in its own folder (EXPERIMENT=<name> or CKPT_DIR=<dir>), or {ALLOW_CONFIG_CHANGE}=1 to "
            "continue this checkpoint with the new settings",
        )
    )
    return findings


def check_run_folder(cfg) -> list[Finding]:
    """Checkpoint retention, the metrics file, the validation batch (config only)."""
    findings = []
    trainer = cfg.trainer
    if not trainer.get("val_only", False) and int(trainer.get("save_freq", -1) or -1) > 0:
        keep = trainer.get("max_actor_ckpt_to_keep", None)
        if keep is None or int(keep) <= 0:
            total, freq = trainer.get("total_training_steps") or 0, int(trainer.save_freq)
            findings.append(
                Finding(
                    "WARNING",
                    f"trainer.max_actor_ckpt_to_keep unset: every checkpoint is kept (up to {int(total) // freq}, "
                    "each ~12 bytes/param)",
                    "KEEP_CKPTS=3 (trainer.max_actor_ckpt_to_keep)",
                )
            )
        else:
            findings.append(Finding("OK", f"checkpoint retention: the newest {int(keep)} (verl removes their actor/)"))
    logger = trainer.get("logger", [])
    loggers = [str(x) for x in (logger if not isinstance(logger, str) else [logger])]
    if "file" in loggers and not trainer.get("val_only", False):
        env = select(cfg, "ray_kwargs.ray_init.runtime_env.env_vars") or {}
        path = env.get("VERL_FILE_LOGGER_PATH") if hasattr(env, "get") else None
        if not path:
            findings.append(
                Finding(
                    "WARNING",
                    "metrics: verl's file logger writes <cwd>/<project>/<experiment>.jsonl and truncates it at every "
                    "launch (a resume loses the earlier steps' metrics)",
                    "VERL_FILE_LOGGER_PATH (run_scripts/common.sh sets it and moves an earlier launch's file aside)",
                )
            )
        else:
            findings.append(Finding("OK", f"metrics: {path} (an earlier launch's file is moved to *.launchN.jsonl)"))
    validates = (
        trainer.get("val_only", False)
        or trainer.get("val_before_train", False)
        or (int(trainer.get("test_freq", -1) or -1) > 0)
    )
    if validates:
        batch = select(cfg, "data.val_batch_size")
        if batch is None:
            findings.append(
                Finding(
                    "WARNING",
                    "data.val_batch_size unset: verl validates the whole validation set as one batch "
                    "(x val_kwargs.n samples at once)",
                    "VAL_BATCH=128 (data.val_batch_size)",
                )
            )
        else:
            findings.append(Finding("OK", f"validation batch: {int(batch)} questions"))
    return findings


def checkpoint_bytes(cfg, num_params: int) -> int:
    """One saved actor checkpoint (FSDP: fp32 model + AdamW m, v; + the bf16 HF model when saved)."""
    contents = select(cfg, "actor_rollout_ref.actor.checkpoint.save_contents") or ["model", "optimizer", "extra"]
    per_param = MODEL_BYTES_PER_PARAM * ("model" in contents) + ADAMW_BYTES_PER_PARAM * ("optimizer" in contents)
    per_param += HF_BYTES_PER_PARAM if "hf_model" in contents else 0
    return int(num_params * per_param)


def _dir_bytes(path: Path) -> int:
    total = 0
    for base, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(base, name))
    return total


def check_disk(cfg, num_params: int, free_bytes: int | None = None) -> list[Finding]:
    """Free disk for the checkpoints this launch writes and keeps."""
    trainer = cfg.trainer
    freq = int(trainer.get("save_freq", -1) or -1)
    if trainer.get("val_only", False) or freq <= 0:
        return []
    root = checkpoint_root(cfg)
    total = int(trainer.get("total_training_steps") or 0)
    found = latest_checkpoint(root) if str(trainer.get("resume_mode", "auto")) == "auto" else None
    start = found[0] if found else 0
    saves = len({s for s in range(start + 1, total + 1) if s % freq == 0} | ({total} if total > start else set()))
    keep = trainer.get("max_actor_ckpt_to_keep", None)
    keep = int(keep) if keep is not None and int(keep) > 0 else saves
    # verl removes an old one before saving when keeping >= 2, after saving when keeping 1
    peak = min(saves, keep + 1 if keep == 1 else keep)
    one = checkpoint_bytes(cfg, num_params)
    need = peak * one
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free if free_bytes is None else free_bytes
    findings = []
    earlier = sorted(p for p in root.glob("global_step_*/actor") if p.is_dir()) if root.is_dir() else []
    if earlier:
        findings.append(
            Finding(
                "INFO",
                f"{len(earlier)} earlier checkpoint(s) with actor/ in {root} ({_dir_bytes(root) / GiB:.1f} GiB): "
                "verl's retention counts only this launch's saves, so these stay until you delete their actor/",
            )
        )
    what = (
        f"disk: {peak} checkpoint(s) of ~{one / GiB:.1f} GiB kept at once ({num_params / 1e9:.2f} B params "
        f"x {one // max(num_params, 1)} bytes), {free / GiB:.1f} GiB free on {probe}"
    )
    if free < need:
        findings.append(
            Finding(
                "ERROR",
                what + ": the save fails part-way",
                "free space, CKPT_DIR=<a larger disk>, or KEEP_CKPTS=1 / a larger SAVE_FREQ",
            )
        )
    else:
        findings.append(Finding("OK", what))
    return findings


def record_launch(cfg, out=None) -> Path | None:
    """Save this launch's config as the checkpoint folder's run_config.yaml (what a later resume is
    compared with) and append a line to its launches.jsonl."""
    from omegaconf import OmegaConf

    if cfg.trainer.get("val_only", False):
        return None
    root = checkpoint_root(cfg)
    root.mkdir(parents=True, exist_ok=True)
    path = root / RUN_CONFIG
    try:
        data = OmegaConf.to_container(cfg, resolve=True)
    except Exception:
        data = OmegaConf.to_container(cfg, resolve=False)
    text = OmegaConf.to_yaml(OmegaConf.create(data))
    atomic_write(path, lambda f: f.write(text.encode()))
    found = latest_checkpoint(root) if str(cfg.trainer.get("resume_mode", "auto")) == "auto" else None
    with open(root / "launches.jsonl", "a", encoding="utf-8") as f:
        line = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "resumed_step": found[0] if found else 0}
        f.write(json.dumps(line) + "\n")
    return path
