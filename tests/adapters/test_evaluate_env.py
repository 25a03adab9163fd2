"""The evaluation of environment games (recipe/arise/tools/evaluate_env.py): success per task type
from verl's validation metrics, whose data sources hold slashes (``env/<env>/<task type>``), the
Table-1-like table with All weighted by each type's games, eval_arise.sh's ENV branch and the command
docs/environments.md gives (its overrides; the run itself is a launch)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from recipe.arise.tools import evaluate_env
from recipe.arise.tools.evaluate import collect_results, markdown_table, write_outputs

REPO = Path(__file__).resolve().parents[2]
# verl's keys for an env evaluation with k=4 (trainer_base: val-core/<data_source>/<var>/<metric>)
METRICS = {
    "val-core/env/twx/coin/acc/mean@4": 0.75,
    "val-aux/env/twx/coin/acc/std@4": 0.2,
    "val-core/env/twx/coin/acc/best@4/mean": 1.0,
    "val-aux/env/twx/coin/env_turns/mean@4": 2.5,
    "val-aux/env/twx/coin/env_invalid/mean@4": 0.25,
    "val-aux/env/twx/coin/env_failed/mean@4": 0.0,
    "val-aux/env/twx/coin/skill_used/mean@4": 1.0,
    "val-core/env/twx/cookingworld/acc/mean@4": 0.25,
    "val-aux/env/twx/cookingworld/env_turns/mean@4": 9.0,
    "val-core/env/twx/cookingworld/acc/mean@2": 0.9,  # a smaller k must not win
    "val-aux/num_turns/mean": 4.0,
}


def test_success_per_task_type_is_read_from_sources_with_slashes():
    results = collect_results(METRICS)
    assert set(results) == {"env/twx/coin", "env/twx/cookingworld"}
    coin = results["env/twx/coin"]
    assert coin == {"pass@1": 0.75, "k": 4, "turns": 2.5, "invalid": 0.25, "failed": 0.0, "skill_use": 1.0}
    assert results["env/twx/cookingworld"]["pass@1"] == 0.25


def test_the_table_has_a_column_per_task_type_and_all_weighted_by_games():
    results = collect_results(METRICS)
    results["env/twx/coin"]["n"], results["env/twx/cookingworld"]["n"] = 30, 10
    lines = markdown_table([("arise", results)])
    assert lines[0] == "twx: success (%) per task type, averaged over k=4 episodes per game"
    assert "| Method | coin | cookingworld | All |" in lines
    assert "| arise | 75.0 | 25.0 | 62.5 |" in lines  # (0.75 x 30 + 0.25 x 10) / 40
    assert not any("Pass@1" in line for line in lines)  # no math benchmark evaluated: no math table
    del results["env/twx/coin"]["n"]  # a count missing: All is the mean over types, and says so
    lines = markdown_table([("arise", results)])
    assert "| arise | 75.0 | 25.0 | 50.0 |" in lines and "mean over task types" in lines[0]


def test_alfworld_types_in_the_peers_order_and_math_beside():
    results = {f"env/alfworld/{t}": {"pass@1": 0.5, "k": 1, "n": 2} for t in ("pick2", "cool", "pick", "look")}
    results["aime24"] = {"pass@1": 0.1, "k": 1}
    lines = markdown_table([("grpo", results)])
    assert lines[0].startswith("Pass@1 (%)") and "| grpo | 10.0 |" in lines
    assert "| Method | pick | look | cool | pick2 | All |" in lines


def test_outputs_hold_the_games_and_episode_means(tmp_path):
    import pandas as pd

    from recipe.arise.data_prep.common import write_parquet_atomic
    from recipe.arise.data_prep.schema import make_env_row

    rows = [
        make_env_row("twx", {"game": g, "seed": s}, {}, "Find the coin.", g, split="test", index=i)
        for i, (g, s) in enumerate([("coin", 1), ("coin", 2), ("coin", 3), ("cookingworld", 1)])
    ]
    data = write_parquet_atomic(rows, tmp_path / "test.parquet")
    assert set(pd.read_parquet(data)["data_source"]) == {"env/twx/coin", "env/twx/cookingworld"}
    results = collect_results(METRICS)
    evaluate_env.add_game_counts(results, [str(data)])
    assert results["env/twx/coin"]["n"] == 3 and results["env/twx/cookingworld"]["n"] == 1
    paths = write_outputs(results, tmp_path / "out", "arise")
    text = Path(paths["markdown"]).read_text()
    assert "| arise | 75.0 | 25.0 | 62.5 |" in text  # (3 x 0.75 + 0.25) / 4
    assert "| env/twx/coin | 3 | 75.0 | 2.50 | 0.25 | 0.00 | 1.00 | 4 |" in text
    assert "env/twx/cookingworld,0.25" in Path(paths["csv"]).read_text()


def test_a_source_that_is_not_an_environments_is_refused():
    with pytest.raises(ValueError, match="not an environment data source"):
        evaluate_env.split_source("env/twx")


def _print_overrides(command: str, **env) -> dict:
    clean = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=REPO,
        env={**clean, "PRINT_OVERRIDES": "1", "PYTHON": sys.executable, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)


def test_eval_arise_sh_with_env_evaluates_the_test_games_per_task_type():
    args = _print_overrides("bash run_scripts/eval_arise.sh", ENV="twx", MODEL_PATH="m", CKPT="/c/global_step_200")
    assert args["data.val_files"] == f"['{Path.home()}/data/arise/env/twx/test.parquet']"
    assert args["actor_rollout_ref.rollout.val_kwargs.n"] == "4"
    assert args["actor_rollout_ref.rollout.agent.default_agent_loop"] == "arise_env_agent"
    assert args["actor_rollout_ref.rollout.multi_turn.max_assistant_turns"] == "15"  # training's budget


def test_the_documented_evaluation_command_composes():
    """docs/environments.md's evaluation commands (ScienceWorld's, ALFWorld's), their overrides printed
    (the paths they name are the data prep's and a checkpoint's)."""
    text = (REPO / "docs" / "environments.md").read_text()
    blocks = re.findall(r"^```bash\n(.*?)^```", text, re.S | re.M)
    commands = [line for b in blocks for line in b.splitlines() if "eval_arise.sh" in line]
    assert [c.split()[0] for c in commands] == ["ENV=scienceworld", "ENV=alfworld"], commands
    for command, env in zip(commands, ("scienceworld", "alfworld"), strict=True):
        args = _print_overrides(command)
        assert args["data.val_files"].endswith(f"/data/arise/env/{env}/test.parquet']")
        assert args["actor_rollout_ref.rollout.agent.default_agent_loop"] == "arise_env_agent"
