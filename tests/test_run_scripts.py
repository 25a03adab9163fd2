"""Every GPU run script's hydra overrides must compose against the real configs.

The scripts print their overrides with PRINT_OVERRIDES=1 (run_scripts/common.sh: run_main);
a renamed or mistyped key fails here instead of in a user's GPU job.
"""

import os
import subprocess
from pathlib import Path

import pytest

from recipe.arise.arise_config import ARISEConfig

REPO = Path(__file__).resolve().parents[1]
CASES = [
    ("qwen3_4b_arise.sh", {}),
    ("phi4_mini_arise.sh", {}),
    *[
        ("arise.sh", {"ABLATION": a, "MODEL_PATH": "m"})
        for a in ("binary_reward", "random_selection", "no_summary", "no_gate")
    ],
    *[("baseline.sh", {"METHOD": m, "MODEL_PATH": "m"}) for m in ("grpo", "drgrpo", "dapo", "gspo")],
]


def _overrides(script: str, env: dict) -> tuple[str, list[str]]:
    proc = subprocess.run(
        ["bash", str(REPO / "run_scripts" / script)],
        env={**os.environ, **env, "PRINT_OVERRIDES": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("ENTRY=")
    return lines[0][len("ENTRY=") :], lines[1:]


def _compose(entry: str, overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    if entry == "recipe.arise.main_arise":
        config_dir, name = REPO / "recipe" / "arise" / "config", "arise_trainer"
    else:
        import verl.trainer.main_ppo  # noqa: F401

        config_dir, name = Path(verl.trainer.main_ppo.__file__).parent / "config", "ppo_trainer"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        return compose(config_name=name, overrides=overrides)


@pytest.mark.parametrize("script,env", CASES, ids=[f"{s}-{'-'.join(e.values())}" for s, e in CASES])
def test_script_overrides_compose(script, env):
    entry, overrides = _overrides(script, env)
    assert entry in ("recipe.arise.main_arise", "verl.trainer.main_ppo")
    cfg = _compose(entry, overrides)
    assert cfg.data.train_batch_size == 64 and cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6 and cfg.trainer.total_training_steps == 2000
    if entry == "recipe.arise.main_arise":
        arise = ARISEConfig.from_trainer_config(cfg)
        assert arise.enable and arise.phase1_steps == 500
        assert cfg.trainer.v1.trainer_mode == "arise"
        ablation = env.get("ABLATION")
        assert arise.reward.binary == (ablation == "binary_reward")
        assert arise.selection.random == (ablation == "random_selection")
        assert arise.summary.enable == (ablation != "no_summary")
        assert arise.selection.use_gate == (ablation != "no_gate")


def test_unknown_ablation_is_refused():
    proc = subprocess.run(
        ["bash", str(REPO / "run_scripts" / "arise.sh")],
        env={**os.environ, "PRINT_OVERRIDES": "1", "MODEL_PATH": "m", "ABLATION": "nope"},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "unknown ABLATION" in proc.stderr


def test_mistyped_override_fails_to_compose():
    entry, overrides = _overrides("qwen3_4b_arise.sh", {})
    with pytest.raises(Exception, match="gat"):
        _compose(entry, overrides + ["arise.selection.gat=0.3"])
