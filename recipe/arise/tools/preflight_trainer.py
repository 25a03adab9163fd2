"""The preflight's trainer checks: settings verl's v1 trainer reads per trainer mode
(``trainer.v1.trainer_mode``), held to what that mode can run. docs/trainer_modes.md"""

from __future__ import annotations

from recipe.arise.adapters.trainer_modes import TRAINER_MODES
from recipe.arise.tools.preflight_common import Finding, select

# trainer.v1.trainer_mode -> the verl mode whose semantics the trainer runs under: each ARISE trainer
# pins its verl base's mode (recipe/arise/adapters/trainers.py), verl's own names are their own
VERL_MODE = {arise: verl for verl, arise in TRAINER_MODES.items()}


def verl_mode(mode: str) -> str:
    return VERL_MODE.get(mode, mode)


def max_parameter_sync_step(mode: str) -> int | None:
    """The largest ``parameter_sync_step`` a trainer mode can run (None: no limit here). verl's
    ``PPOTrainer.step`` (verl/trainer/ppo/v1/trainer_base.py) samples that many batches per weight
    sync; the sync and colocate_async trainers stop the engines after each sampled batch
    (``on_sample_end``: sleep; colocate_async aborts too) and resume them only at ``on_step_end``, so
    the next batch's rollouts and dynamic sampling's refills would go to stopped engines. Only
    separate_async's standalone servers keep generating between syncs."""
    return None if verl_mode(mode) == "separate_async" else 1


def check_parameter_sync_step(cfg) -> list[Finding]:
    """``trainer.v1.<mode>.parameter_sync_step`` (what ``PPOTrainer.__init__`` reads, default 1) within
    :func:`max_parameter_sync_step` of the trainer mode; the run's own mode's section too (``arise``:
    verl does not read it, and a value there would be ignored without a word). Nothing set: []."""
    mode = str(select(cfg, "trainer.v1.trainer_mode", "sync"))
    limit = max_parameter_sync_step(mode)
    findings: list[Finding] = []
    for section in dict.fromkeys((verl_mode(mode), mode)):
        key = f"trainer.v1.{section}.parameter_sync_step"
        value = select(cfg, key)
        if value is None:
            continue
        steps = value if isinstance(value, int) and not isinstance(value, bool) else None
        if steps is None or steps < 1:
            findings.append(Finding("ERROR", f"{key}={value!r}: a whole number >= 1", f"{key}=1"))
        elif limit is not None and steps > limit:
            why = (
                f"under trainer_mode {mode} ({verl_mode(mode)} semantics) verl samples {steps} batches per "
                "global step and the rollout engines are stopped after each one (on_sample_end puts them to "
                "sleep): the next batch's rollouts and dynamic sampling's refills would go to sleeping engines"
            )
            findings.append(Finding("ERROR", f"{key}={steps}: {why}", f"{key}={limit} (or drop it)"))
    return findings
