"""PRESET=paper: the paper's literal settings as one switch (run_scripts/presets/paper.sh, sourced by
run_scripts/common.sh after the script's overrides and before the command line's)."""

import os
import sys
from pathlib import Path

import pytest

from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.tools import preflight

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "run_scripts"

# the paper's literal values (docs/design.md rows; README "Defaults that differ from the paper")
LITERAL = {
    "arise.selection.temperature": "1.0",  # sigma, App. A.1 (the default calibrates it)
    "arise.selection.score_norm": "sum",  # Eq. 2
    "arise.selection.control_share": "0",  # no control arm
    "arise.summary.max_per_step": "-1",  # Alg. 1: one O_{G+1} per query with tau+
    "arise.summary.on_overlong": "discard",  # App. D.1
    "arise.library.new_skill_policy": "literal",  # App. C.2 ADD: utility 0
    "arise.library.seed_trial_uses": "0",  # seeds are ordinary entries
    "arise.library.dedupe": "false",  # App. C.2 ADD: no duplicate check
}


def _env(**extra):
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "USER")}
    return {**keep, "PYTHON": sys.executable, **extra}


def _overrides(script, *args, **env):
    return preflight.script_overrides(SCRIPTS / script, extra=args, env=_env(**env))


def _last(overrides, key):
    values = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key]
    return values[-1] if values else None


@pytest.mark.parametrize("script", ["qwen3_4b_arise.sh", "phi4_mini_arise.sh"])
def test_preset_paper_prints_the_literal_settings(script):
    _, overrides = _overrides(script, PRESET="paper")
    for key, value in LITERAL.items():
        assert _last(overrides, key) == value, key
    _, plain = _overrides(script)
    assert not any(o.startswith("arise.selection.score_norm=") for o in plain)  # only with the preset


def test_preset_paper_composes_and_the_command_line_still_wins():
    entry, overrides = _overrides("qwen3_4b_arise.sh", "arise.selection.control_share=0.5", PRESET="paper")
    arise = ARISEConfig.from_trainer_config(preflight.compose(entry, overrides))
    sel, lib, summary = arise.selection, arise.library, arise.summary
    assert sel.temperature == 1.0 and not sel.auto_temperature and sel.score_norm == "sum"
    assert sel.control_share == 0.5  # the user's override comes after the preset's
    assert (summary.max_per_step, summary.on_overlong) == (-1, "discard")
    assert (lib.new_skill_policy, lib.seed_trial_uses, lib.rank_by) == ("literal", 0, "utility")
    assert lib.dedupe is False
    # the paper's table values that are the defaults anyway
    assert (sel.epsilon, sel.gate, lib.cache_capacity, lib.reservoir_capacity, lib.ema_beta) == (
        0.1,
        0.35,
        10,
        100,
        0.9,
    )
    assert arise.phase1_steps == 500 and arise.reward.skill_bonus == 1.0


@pytest.mark.parametrize(
    "method,agg", [("grpo", "seq-mean-token-mean"), ("dapo", "token-mean"), ("drgrpo", "seq-mean-token-sum-norm")]
)
def test_loss_aggregation_is_eq5_with_or_without_the_preset(method, agg):
    """Eq. 5 averages each trajectory's tokens, then the group (verl's default is token-mean): ARISE and the
    GRPO baseline use it, with or without the preset; DAPO, Dr.GRPO and GSPO keep the aggregation their
    method defines (the preset must not override it)."""
    for preset in ({}, {"PRESET": "paper"}):
        _, arise = _overrides("qwen3_4b_arise.sh", **preset)
        assert _last(arise, "actor_rollout_ref.actor.loss_agg_mode") == "seq-mean-token-mean"
        entry, overrides = _overrides("baseline.sh", METHOD=method, MODEL_PATH="m", **preset)
        cfg = preflight.compose(entry, overrides)
        assert cfg.actor_rollout_ref.actor.loss_agg_mode == agg, (method, preset)
