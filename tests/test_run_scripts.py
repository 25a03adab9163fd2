"""Every run script's final config must compose and pass verl's own validation, without a GPU.

Each script prints its entry and final hydra overrides with PRINT_OVERRIDES=1 (run_scripts/common.sh:
run_main; recipe.arise.tools.evaluate --print-overrides). The config is composed and checked with the
functions of recipe.arise.tools.preflight, the same ones the scripts run before a job starts: verl's
validate_config and dataclass conversions, no mandatory value unset in a component the run uses,
rollout.max_model_len >= prompt + response, an actor attention backend the README's GPU install
provides. Also here: the preflight CLI and its memory estimator (a fake Qwen3-4B config.json).
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from recipe.arise.core.arise_config import ARISEConfig
from recipe.arise.tools import preflight

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "run_scripts"
PY = {"PYTHON": sys.executable}
EVAL = {"MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507", "CKPT": "/ckpt/global_step_2000", **PY}

ENVS = ("twx", "scienceworld", "alfworld")  # ENV=<name>: the env agent (common.sh)
CASES = [
    ("qwen3_4b_arise.sh", {}),
    ("phi4_mini_arise.sh", {}),
    *[
        ("arise.sh", {"ABLATION": a, "MODEL_PATH": "m"})
        for a in ("binary_reward", "random_selection", "no_summary", "no_gate")
    ],
    ("arise.sh", {"ROLLOUT": "sglang", "MODEL_PATH": "m"}),
    *[("baseline.sh", {"METHOD": m, "MODEL_PATH": "m"}) for m in ("grpo", "drgrpo", "dapo", "gspo")],
    ("eval_arise.sh", EVAL),
    ("eval_arise.sh", {**EVAL, "SKILLS": "false", "DECODING": "greedy"}),
    ("cpu_smoke_arise.sh", {"OUT_DIR": "/tmp/arise_print_only", **PY}),
    ("cpu_smoke_arise.sh", {"OUT_DIR": "/tmp/arise_print_only", "ARISE": "false", **PY}),
    ("cpu_smoke_arise.sh", {"OUT_DIR": "/tmp/arise_print_only", "TRAINER_MODE": "colocate_async", **PY}),
    ("cpu_smoke_arise.sh", {"OUT_DIR": "/tmp/arise_print_only", "ENV": "twx", **PY}),  # the env agent
    ("cpu_smoke_arise.sh", {"OUT_DIR": "/tmp/arise_print_only", "ENV": "scienceworld", **PY}),
    ("eval_arise.sh", {**EVAL, "CPU": "1", "MODEL_PATH": "/tmp/tiny/model", "DATA_FILES": "/tmp/tiny/val.parquet"}),
    ("gpu_check.sh", {"MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507", **PY}),
    # the tool agent (TOOL=python): ARISE, the GRPO baseline through the same path, the evaluation
    ("qwen3_4b_arise_tool.sh", {}),
    ("baseline.sh", {"METHOD": "grpo", "TOOL": "python", "MODEL_PATH": "m"}),
    ("eval_arise.sh", {**EVAL, "TOOL": "python"}),
    # the env agent (ENV=twx|scienceworld): ARISE and the GRPO baseline through the same path
    *[("qwen3_4b_arise_env.sh", {"ENV": e}) for e in ("twx", "scienceworld", "alfworld")],
    *[("baseline.sh", {"METHOD": m, "ENV": "twx", "MODEL_PATH": "m"}) for m in ("grpo", "drgrpo", "gspo")],
    *[("baseline.sh", {"METHOD": "grpo", "ENV": e, "MODEL_PATH": "m"}) for e in ("scienceworld", "alfworld")],
    ("eval_arise.sh", {**EVAL, "ENV": "twx"}),  # success per task type (tests/adapters/test_evaluate_env.py)
]
# every training script with its defaults: each must get a checkpoint folder of its own
TRAINING = [
    ("qwen3_4b_arise.sh", {}),
    ("phi4_mini_arise.sh", {}),
    *[("arise.sh", {"ABLATION": a, "MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507"}) for a in ("no_gate", "no_summary")],
    *[
        ("baseline.sh", {"METHOD": m, "MODEL_PATH": p})
        for m in ("grpo", "drgrpo", "dapo", "gspo")
        for p in ("Qwen/Qwen3-4B-Instruct-2507", "microsoft/Phi-4-mini-instruct")
    ],
    ("gpu_check.sh", {"MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507", **PY}),
    ("gpu_check.sh", {"MODEL_PATH": "microsoft/Phi-4-mini-instruct", **PY}),
    ("cpu_smoke_arise.sh", {"TINY_DIR": "/tmp/t", **PY}),
    ("cpu_smoke_arise.sh", {"TINY_DIR": "/tmp/t", "ARISE": "false", **PY}),
    ("cpu_smoke_arise.sh", {"TINY_DIR": "/tmp/t", "TRAINER_MODE": "colocate_async", **PY}),
    ("cpu_smoke_arise.sh", {"TINY_DIR": "/tmp/t", "ENV": "twx", **PY}),
    ("cpu_smoke_arise.sh", {"TINY_DIR": "/tmp/t", "ENV": "scienceworld", **PY}),
    ("qwen3_4b_arise_tool.sh", {}),
    ("baseline.sh", {"METHOD": "grpo", "TOOL": "python", "MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507"}),
    *[("qwen3_4b_arise_env.sh", {"ENV": e}) for e in ("twx", "scienceworld", "alfworld")],
    *[
        ("baseline.sh", {"METHOD": "grpo", "ENV": e, "MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507"})
        for e in ("twx", "scienceworld", "alfworld")
    ],
]
IDS = [f"{s}-{'-'.join(v for k, v in e.items() if k not in ('PYTHON', 'OUT_DIR', 'CKPT'))}" for s, e in CASES]


def _clean_env(env: dict) -> dict:
    """The test's environment must not leak run settings into the scripts."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR", "USER")}
    return {**keep, **env}


def _overrides(script: str, env: dict) -> tuple[str, list[str]]:
    return preflight.script_overrides(SCRIPTS / script, env=_clean_env(env))


@pytest.fixture(scope="module")
def composed():
    cache = {}

    def get(script, env):
        key = (script, tuple(sorted(env.items())))
        if key not in cache:
            entry, overrides = _overrides(script, env)
            cache[key] = (entry, overrides, preflight.compose(entry, overrides))
        return cache[key]

    return get


@pytest.mark.parametrize("script,env", CASES, ids=IDS)
def test_final_config_passes_verl_validation(script, env, composed):
    entry, overrides, cfg = composed(script, env)
    assert entry == "recipe.arise.adapters.main_arise"  # baselines and evaluation go through the ARISE trainer too
    findings = preflight.check_config(cfg, entry, check_paths=False, check_runtime=False)
    errors = [f.line() for f in findings if f.level == "ERROR"]
    assert not errors, "\n".join(errors)
    ran = " ".join(f.what for f in findings)
    for check in ("validate_config", "RolloutConfig", "reward manager", "ARISE config", "max_model_len"):
        assert check in ran

    assert preflight.missing_values(cfg) == []
    assert set(preflight.unused_components(cfg)) >= {"critic", "actor_rollout_ref.ref", "reward.reward_model"}
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.name == env.get("ROLLOUT", "vllm")
    assert rollout.max_model_len >= cfg.data.max_prompt_length + cfg.data.max_response_length
    budget = preflight.length_budget(cfg)
    assert rollout.max_model_len >= max(budget.values())  # the skill-injected prompt, scoring, summary
    assert preflight.attention_backend(cfg) == EXPECTED_ATTENTION or env.get("CPU") == "1"
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp2"  # the engine the CPU end-to-end run exercises
    assert cfg.data.val_batch_size == 128  # bounded, for training's validation and the evaluation


# ATTN=auto: flash_attention_2 (packed) where flash_attn imports in the run's python, else sdpa (padded)
FLASH = subprocess.run([sys.executable, "-c", "import flash_attn"], capture_output=True).returncode == 0
EXPECTED_ATTENTION = "flash_attention_2" if FLASH else "sdpa"


@pytest.mark.parametrize(
    "script,env", TRAINING, ids=[f"{s}-{'-'.join(v for k, v in e.items() if k != 'PYTHON')}" for s, e in TRAINING]
)
def test_training_run_folder(script, env, composed):
    """Bounded retention, the metrics file per run passed to Ray, the run's settings-check inputs."""
    _, overrides, cfg = composed(script, env)
    keep = cfg.trainer.max_actor_ckpt_to_keep
    assert keep is not None and 1 <= keep <= 3
    metrics = cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH
    folder = cfg.trainer.default_local_dir
    assert os.path.isabs(metrics) and os.path.isabs(folder)
    if script != "cpu_smoke_arise.sh":
        assert metrics == f"{folder}/metrics.jsonl"  # per run, next to its checkpoints
    else:
        assert os.path.dirname(metrics) == os.path.dirname(folder)  # OUT_DIR/metrics.jsonl, OUT_DIR/checkpoints
    findings = preflight.check_run_folder(cfg)
    assert not [f for f in findings if f.level != "OK"], [f.line() for f in findings]


@pytest.mark.parametrize(
    "script,env",
    [("qwen3_4b_arise_tool.sh", {}), ("baseline.sh", {"METHOD": "grpo", "TOOL": "python", "MODEL_PATH": "m"})],
)
def test_tool_runs_use_the_tool_agent(script, env, composed):
    """TOOL=python: verl's multi-turn loop with ARISE's layer, the sandboxed Python tool, the tool data."""
    _, _, cfg = composed(script, env)
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.agent.default_agent_loop == "arise_tool_agent"
    assert rollout.multi_turn.enable and rollout.multi_turn.max_assistant_turns >= 2
    tool_config = Path(rollout.multi_turn.tool_config_path)
    assert tool_config.is_file() and "recipe.arise.adapters.python_tool" in tool_config.read_text()
    assert "/data/arise_tool/" in cfg.data.train_files
    assert cfg.arise.enable is (script != "baseline.sh")


@pytest.mark.parametrize(
    "script,env",
    [
        *[("qwen3_4b_arise_env.sh", {"ENV": e}) for e in ("twx", "scienceworld", "alfworld")],
        *[
            ("baseline.sh", {"METHOD": "grpo", "ENV": e, "MODEL_PATH": "m"})
            for e in ("twx", "scienceworld", "alfworld")
        ],
    ],
)
def test_env_runs_use_the_env_agent_with_the_peers_budgets(script, env, composed):
    """ENV=<name>: the env agent on that environment's games, the paper's G and lr, the peers' batch,
    steps and turn budget (WebShop's 15 for twx, ALFWorld's 50 for scienceworld and alfworld), same for
    ARISE and GRPO."""
    _, _, cfg = composed(script, env)
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.agent.default_agent_loop == "arise_env_agent" and not rollout.multi_turn.enable
    assert rollout.multi_turn.max_assistant_turns == {"twx": 15, "scienceworld": 50, "alfworld": 50}[env["ENV"]]
    assert cfg.data.train_files.endswith(f"/data/arise/env/{env['ENV']}/train.parquet")
    assert cfg.data.val_files.endswith(f"/data/arise/env/{env['ENV']}/test.parquet")
    assert rollout.n == 8 and cfg.actor_rollout_ref.actor.optim.lr == 1e-6
    assert cfg.data.train_batch_size == 16 and cfg.trainer.total_training_steps == 200
    assert cfg.trainer.n_gpus_per_node == 8 and cfg.algorithm.filter_groups.enable
    response = {"twx": 8192, "scienceworld": 24576, "alfworld": 24576}[env["ENV"]]
    assert cfg.data.max_response_length == response and rollout.max_model_len == 2048 + 256 + response
    assert cfg.arise.enable is (script != "baseline.sh")
    if cfg.arise.enable:
        assert cfg.arise.phase1_steps == 50
    assert cfg.trainer.default_local_dir.endswith(
        f"/checkpoints/arise_{'qwen3_4b' if script != 'baseline.sh' else 'm'}/"
        f"{'arise' if script != 'baseline.sh' else 'grpo'}_env_{env['ENV']}"
    )


@pytest.mark.parametrize(
    "script,env,message",
    [
        ("qwen3_4b_arise_env.sh", {}, "set ENV=twx, ENV=scienceworld or ENV=alfworld"),
        ("qwen3_4b_arise_env.sh", {"ENV": "webshop"}, "unknown ENV=webshop (twx, scienceworld, alfworld"),
        ("baseline.sh", {"METHOD": "dapo", "ENV": "twx", "MODEL_PATH": "m"}, "METHOD=dapo with ENV=twx"),
    ],
)
def test_env_runs_refuse_what_they_cannot_run(script, env, message):
    r = subprocess.run(
        ["bash", str(SCRIPTS / script)],
        env=_clean_env({"PRINT_OVERRIDES": "1", **PY, **env}),
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_tool_runs_refuse_an_unknown_tool():
    r = subprocess.run(
        ["bash", str(SCRIPTS / "qwen3_4b_arise_tool.sh")],
        env=_clean_env({"TOOL": "bash", "PRINT_OVERRIDES": "1", **PY}),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "unknown TOOL=bash" in r.stderr


def test_every_training_run_has_its_own_checkpoint_folder(composed):
    folders = {}
    for script, env in TRAINING:
        _, _, cfg = composed(script, env)
        folders.setdefault(cfg.trainer.default_local_dir, []).append((script, env))
    shared = {k: v for k, v in folders.items() if len(v) > 1}
    assert not shared, shared
    _, _, qwen = composed("qwen3_4b_arise.sh", {})
    _, _, grpo = composed("baseline.sh", {"METHOD": "grpo", "MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507"})
    _, _, phi = composed("baseline.sh", {"METHOD": "grpo", "MODEL_PATH": "microsoft/Phi-4-mini-instruct"})
    assert qwen.trainer.default_local_dir.endswith("/checkpoints/arise_qwen3_4b/arise")  # README's path
    assert grpo.trainer.default_local_dir.endswith("/checkpoints/arise_qwen3_4b/grpo")
    assert phi.trainer.default_local_dir.endswith("/checkpoints/arise_phi4_mini/grpo")


def test_phi4_mini_stays_within_its_original_rope_positions(composed):
    """LongRoPE: every Phi-4-mini run (ARISE, baseline, evaluation) keeps max_model_len <= 4096."""
    phi = {"MODEL_PATH": "microsoft/Phi-4-mini-instruct"}
    for script, env in (
        ("phi4_mini_arise.sh", {}),
        ("baseline.sh", {"METHOD": "dapo", **phi}),
        ("eval_arise.sh", {**EVAL, **phi}),
        ("gpu_check.sh", {**phi, **PY}),
    ):
        _, _, cfg = composed(script, env)
        assert cfg.actor_rollout_ref.rollout.max_model_len == 4096, script
        assert cfg.data.max_response_length == 2816 and cfg.data.max_prompt_length == 1024
    config = {"rope_scaling": {"type": "longrope"}, "original_max_position_embeddings": 4096}
    _, _, cfg = composed("phi4_mini_arise.sh", {})
    assert [f.level for f in preflight.check_longrope(cfg, config)] == ["OK"]
    _, _, cfg = composed("phi4_mini_arise.sh", {"MAX_RESPONSE": "4096"})
    assert [f.level for f in preflight.check_longrope(cfg, config)] == ["ERROR"]


def test_gpu_check_composes_like_the_training_scripts(composed):
    _, overrides, cfg = composed("gpu_check.sh", {"MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507", **PY})
    _, train_overrides, _ = composed("qwen3_4b_arise.sh", {})
    keys = lambda overrides: {o.split("=", 1)[0].lstrip("+") for o in overrides}  # noqa: E731
    assert keys(train_overrides) <= keys(overrides)
    # launch 1: steps 1-5 from scratch, validated and saved at 5; the exact IG every 2 steps
    assert cfg.trainer.total_training_steps == 5 and cfg.arise.phase1_steps == 1  # Phase II from step 2
    assert cfg.trainer.save_freq == 5 and cfg.trainer.max_actor_ckpt_to_keep == 1
    assert cfg.trainer.resume_mode == "disable" and cfg.trainer.test_freq == 5
    assert cfg.arise.ig.every_n_steps == 2
    assert cfg.trainer.default_local_dir.endswith("/checkpoints/arise_qwen3_4b/gpu_check")
    assert cfg.data.train_batch_size == 64 and cfg.trainer.n_gpus_per_node == 8  # the user's settings
    # launch 2: resumes launch 1's checkpoint by path, to step 10, validated at 10
    env = {"MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507", "GPU_CHECK_LAUNCH": "2", **PY}
    _, _, second = composed("gpu_check.sh", env)
    assert second.trainer.resume_mode == "resume_path" and second.trainer.total_training_steps == 10
    assert second.trainer.resume_from_path == cfg.trainer.default_local_dir + "/global_step_5"
    assert second.trainer.test_freq == 10 and second.arise.ig.every_n_steps == 2


@pytest.mark.parametrize(
    "env,message", [({"STEPS": "3"}, "STEPS must be an integer >= 4"), ({"IG_EVERY": "0"}, "IG_EV")]
)
def test_gpu_check_refuses_steps_it_cannot_split(env, message):
    run_env = _clean_env({"MODEL_PATH": "Qwen/Qwen3-4B-Instruct-2507", "PRINT_OVERRIDES": "1", **PY, **env})
    done = subprocess.run(["bash", str(SCRIPTS / "gpu_check.sh")], env=run_env, capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr


def test_gpu_check_runs_its_two_launches_as_two_jobs(tmp_path):
    """GPU_CHECK_ONLY=1 runs launch 1 and stops; GPU_CHECK_ONLY=2 refuses without launch 1's
    checkpoint, else resumes it and ends with the verdict and the coverage (a lent GPU's calls,
    or a cluster's jobs, are shorter than the whole check)."""
    scripts = tmp_path / "run_scripts"
    scripts.mkdir()
    shutil.copy(SCRIPTS / "gpu_check.sh", scripts)
    (scripts / "common.sh").write_text("VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-$CKPT_DIR/metrics.jsonl}\n")
    # the launches and the verdict write what they were asked to do
    (scripts / "arise.sh").write_text(
        'echo "launch $TOTAL_STEPS $*" >>"$CALLS"; mkdir -p "$CKPT_DIR/global_step_$TOTAL_STEPS"\n'
        'echo "{}" >>"$CKPT_DIR/metrics.jsonl"\n'
    )
    python = tmp_path / "python"
    python.write_text('#!/bin/sh\necho "python $2" >>"$CALLS"\n')
    python.chmod(0o755)
    calls = tmp_path / "calls.txt"
    base = {"MODEL_PATH": "m", "STEPS": "4", "CKPT_DIR": str(tmp_path / "ckpt"), "CALLS": str(calls)}
    run = lambda only: subprocess.run(  # noqa: E731
        ["bash", str(scripts / "gpu_check.sh")],
        env=_clean_env({**base, "PYTHON": str(python), "GPU_CHECK_ONLY": only}),
        capture_output=True,
        text=True,
    )
    second = run("2")
    assert second.returncode == 2 and "run GPU_CHECK_ONLY=1 first" in second.stderr, second.stderr
    first = run("1")
    assert first.returncode == 0 and "next: GPU_CHECK_ONLY=2" in first.stdout, first.stderr
    assert calls.read_text().splitlines() == ["launch 2 trainer.resume_mode=disable arise.ig.every_n_steps=2"]
    second = run("2")
    assert second.returncode == 0, second.stderr
    assert calls.read_text().splitlines()[1:] == [
        f"launch 4 trainer.resume_mode=resume_path trainer.resume_from_path={tmp_path}/ckpt/global_step_2"
        " arise.ig.every_n_steps=2",
        "python recipe.arise.tools.verdict",
        "python recipe.arise.tools.gpu_check_coverage",
    ]
    assert run("3").returncode == 2


def test_preset_overrides_come_after_the_script_and_before_the_command_line(tmp_path):
    presets = SCRIPTS / "presets"
    name = f"test_{os.getpid()}"
    preset = presets / f"{name}.sh"
    preset.write_text(
        ': "${MAX_RESPONSE:=2048}"\nPRESET_OVERRIDES=(arise.selection.gate=0.5 arise.selection.epsilon=0.2)\n'
    )
    try:
        env = _clean_env({"MODEL_PATH": "m", "PRESET": name, "ABLATION": "no_gate"})
        _, overrides = preflight.script_overrides(SCRIPTS / "arise.sh", ["arise.selection.epsilon=0.3"], env=env)
        assert overrides.index("arise.selection.use_gate=false") < overrides.index("arise.selection.gate=0.5")
        assert overrides[-1] == "arise.selection.epsilon=0.3"
        cfg = preflight.compose("recipe.arise.adapters.main_arise", overrides)
        assert cfg.arise.selection.gate == 0.5 and cfg.arise.selection.epsilon == 0.3
        assert cfg.data.max_response_length == 2048  # an environment default of the preset
        assert cfg.trainer.default_local_dir.endswith(f"/arise_m/arise_no_gate_{name}")  # its own folder
        _, base = preflight.script_overrides(
            SCRIPTS / "baseline.sh", env=_clean_env({"MODEL_PATH": "m", "PRESET": name})
        )
        assert "arise.selection.gate=0.5" in base
    finally:
        preset.unlink()
    proc = subprocess.run(
        ["bash", str(SCRIPTS / "arise.sh")],
        env=_clean_env({"MODEL_PATH": "m", "PRESET": "no_such_preset", "PRINT_OVERRIDES": "1"}),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and "run_scripts/presets/no_such_preset.sh" in proc.stderr


def test_metrics_of_an_earlier_launch_are_moved_aside(tmp_path):
    """verl's file logger truncates its file: run_main moves a non-empty one to the next launch part."""
    metrics = tmp_path / "metrics.jsonl"
    script = (
        f'source "{SCRIPTS}/common.sh" >/dev/null\n'
        f"for i in 1 2 3; do rotate_metrics {metrics}\n"
        f'  printf \'{{"step": %d, "data": {{}}}}\\n\' $i > {metrics}\n'
        "done\n"
        f"rotate_metrics {tmp_path}/none.jsonl\n"
    )
    proc = subprocess.run(
        ["bash", "-c", script], env=_clean_env({"MODEL_PATH": "m", **PY}), capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "metrics.jsonl",
        "metrics.launch1.jsonl",
        "metrics.launch2.jsonl",
    ]
    assert json.loads((tmp_path / "metrics.launch1.jsonl").read_text())["step"] == 1
    from recipe.arise.tools.report import read_metrics

    rows, _ = read_metrics(metrics)
    assert sorted(rows) == [1, 2, 3]


# the env runs' own settings: test_env_runs_use_the_env_agent_with_the_peers_budgets
@pytest.mark.parametrize(
    "script,env", [c for c in CASES if c[0] != "cpu_smoke_arise.sh" and "CPU" not in c[1] and "ENV" not in c[1]]
)
def test_gpu_settings(script, env, composed):
    _, _, cfg = composed(script, env)
    assert cfg.data.train_batch_size == 64 and cfg.trainer.n_gpus_per_node == 8
    phi4 = script == "phi4_mini_arise.sh"  # LongRoPE: within its 4,096 original positions (docs/gpu.md)
    assert cfg.actor_rollout_ref.rollout.max_model_len == (4096 if phi4 else 1024 + 256 + 4096)
    assert cfg.actor_rollout_ref.model.use_remove_padding is FLASH  # sdpa pads, flash-attn packs (docs/gpu.md)
    if script == "eval_arise.sh":
        return
    assert cfg.actor_rollout_ref.rollout.n == 8
    steps = 5 if script == "gpu_check.sh" else 2000  # gpu_check: its first launch
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6 and cfg.trainer.total_training_steps == steps
    assert cfg.actor_rollout_ref.actor.optim.lr_warmup_steps == 50
    assert cfg.algorithm.filter_groups.enable  # the same dynamic sampling for ARISE and every baseline
    if script != "baseline.sh" or env.get("METHOD") == "grpo":  # Eq. 5; drgrpo/dapo/gspo define their own
        assert cfg.actor_rollout_ref.actor.loss_agg_mode == "seq-mean-token-mean"


@pytest.mark.parametrize("ablation", [None, "binary_reward", "random_selection", "no_summary", "no_gate"])
def test_arise_and_ablations(ablation, composed):
    env = {"MODEL_PATH": "m", **({"ABLATION": ablation} if ablation else {})}
    _, _, cfg = composed("arise.sh", env)
    arise = ARISEConfig.from_trainer_config(cfg)
    assert arise.enable and arise.phase1_steps == 500
    assert cfg.trainer.v1.trainer_mode == "arise"
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "arise_agent"
    assert arise.reward.binary == (ablation == "binary_reward")
    assert arise.selection.random == (ablation == "random_selection")
    assert arise.summary.enable == (ablation != "no_summary")
    assert arise.selection.use_gate == (ablation != "no_gate")


@pytest.mark.parametrize("method", ["grpo", "drgrpo", "dapo", "gspo"])
def test_baselines_run_through_the_arise_trainer(method, composed):
    _, _, cfg = composed("baseline.sh", {"METHOD": method, "MODEL_PATH": "m"})
    assert cfg.trainer.v1.trainer_mode == "arise" and not ARISEConfig.from_trainer_config(cfg).enable
    actor, algo, reward = cfg.actor_rollout_ref.actor, cfg.algorithm, cfg.reward
    if method == "dapo":
        assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.loss_agg_mode) == (0.2, 0.28, "token-mean")
        assert algo.filter_groups.metric == "acc"
        assert (reward.reward_manager.source, reward.reward_manager.name) == ("register", "dapo")
        assert reward.custom_reward_function.path == "pkg://recipe.arise.adapters.verl_score"  # the same grader
        assert reward.reward_kwargs.overlong_buffer_cfg.enable and reward.reward_kwargs.max_resp_len == 4096
        assert 0 < reward.reward_kwargs.overlong_buffer_cfg.len < 4096
    else:  # the ARISE reward manager, binary with arise.enable=false: the project's grader
        assert reward.reward_manager.name == "ARISERewardManager"
        assert algo.filter_groups.metric == "reward"
    if method == "drgrpo":
        assert actor.loss_agg_mode == "seq-mean-token-sum-norm" and algo.norm_adv_by_std_in_grpo is False
    if method == "gspo":
        assert actor.policy_loss.loss_mode == "gspo" and actor.loss_agg_mode == "seq-mean-token-mean"
    if method == "grpo":  # ARISE's own aggregation, Eq. 5 (common.sh), not verl's token-mean
        assert actor.loss_agg_mode == "seq-mean-token-mean" and algo.norm_adv_by_std_in_grpo is True


@pytest.mark.parametrize("skills", ["true", "false"])
def test_evaluation_config(skills, composed):
    env = {**EVAL, "SKILLS": skills, "OUT": "/tmp/arise_eval_print"}
    _, overrides, cfg = composed("eval_arise.sh", env)
    assert cfg.trainer.val_only and cfg.trainer.resume_mode == "resume_path"
    assert cfg.trainer.resume_from_path == "/ckpt/global_step_2000"
    assert cfg.arise.enable == (skills == "true")
    assert cfg.actor_rollout_ref.rollout.val_kwargs.n == 32
    assert (
        cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == "/tmp/arise_eval_print/val_metrics.jsonl"
    )
    assert cfg.trainer.default_local_dir == "/tmp/arise_eval_print/trainer_state"
    assert any(o.startswith("hydra.run.dir=") and "/tmp/arise_eval_print/hydra" in o for o in overrides)
    # the registration env var from arise_trainer.yaml survives the added key
    assert (
        cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == "recipe.arise.adapters.verl_register"
    )


def test_cpu_scripts_layer_on_the_gpu_path(composed):
    gpu_entry, gpu_overrides, _ = composed("arise.sh", {"MODEL_PATH": "m"})
    cpu_env = {"OUT_DIR": "/tmp/arise_print_only", "TINY_DIR": "/tmp/arise_print_only/tiny", **PY}
    _, cpu_overrides, cfg = composed("cpu_smoke_arise.sh", cpu_env)
    keys = lambda overrides: {o.split("=", 1)[0].lstrip("+") for o in overrides}  # noqa: E731
    assert keys(gpu_overrides) <= keys(cpu_overrides)  # every GPU override is in the CPU run too
    assert cfg.trainer.device == "cpu" and cfg.actor_rollout_ref.rollout.max_model_len == 1024
    assert cfg.trainer.total_training_steps == 6 and cfg.arise.phase1_steps == 2 and cfg.trainer.save_freq == 2
    assert cfg.trainer.default_local_dir == "/tmp/arise_print_only/checkpoints"
    assert cfg.actor_rollout_ref.model.path == "/tmp/arise_print_only/tiny/model"
    _, _, grpo = composed("cpu_smoke_arise.sh", {**cpu_env, "ARISE": "false"})
    assert grpo.arise.enable is False and grpo.trainer.experiment_name == "grpo"


@pytest.mark.parametrize(
    "mode,expected",
    [(None, "arise"), ("sync", "arise"), ("colocate_async", "colocate_async"), ("separate_async", "separate_async")],
)
def test_trainer_mode_reaches_the_config(mode, expected, composed):
    env = {"OUT_DIR": "/tmp/arise_print_only", **PY, **({"TRAINER_MODE": mode} if mode else {})}
    _, _, cfg = composed("cpu_smoke_arise.sh", env)
    assert cfg.trainer.v1.trainer_mode == expected  # main_arise maps verl's name to the ARISE trainer


def _trainer_findings(cfg, entry):
    from recipe.arise.tools.preflight_trainer import check_separate_async

    findings = preflight.check_config(cfg, entry, check_paths=False, check_runtime=False)
    assert not [f for f in findings if f.level == "ERROR"], findings
    return check_separate_async(cfg, local_gpus=8)


def test_separate_async_splits_the_gpus_and_the_batch_on_gpu(composed):
    """GPUS_PER_NODE is the node's: the rollout servers get ROLLOUT_GPUS (half), the trainer the rest;
    PARAM_SYNC_STEP mini-batches of TRAIN_BATCH/PARAM_SYNC_STEP between weight syncs, over nccl."""
    env = {"MODEL_PATH": "m", "TRAINER_MODE": "separate_async", "PARAM_SYNC_STEP": "4"}
    entry, _, cfg = composed("arise.sh", env)
    rollout = cfg.actor_rollout_ref.rollout
    assert (cfg.trainer.n_gpus_per_node, rollout.n_gpus_per_node, rollout.nnodes) == (4, 4, 1)
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 16 and rollout.checkpoint_engine.backend == "nccl"
    assert cfg.trainer.v1.separate_async.parameter_sync_step == 4 and cfg.actor_rollout_ref.hybrid_engine
    assert [f.level for f in _trainer_findings(cfg, entry)] == ["OK"]
    with pytest.raises(RuntimeError, match="TRAIN_BATCH=64 is no multiple of PARAM_SYNC_STEP=5"):
        _overrides("arise.sh", {**env, "PARAM_SYNC_STEP": "5"})
    with pytest.raises(RuntimeError, match="PARAM_SYNC_STEP=2: only separate_async trains several mini-batches"):
        _overrides("arise.sh", {"MODEL_PATH": "m", "PARAM_SYNC_STEP": "2"})  # sync: never ignored silently
    with pytest.raises(RuntimeError, match="unknown TRAINER_MODE=fully_async"):  # no such mode: the script stops
        _overrides("arise.sh", {"MODEL_PATH": "m", "TRAINER_MODE": "fully_async"})


def test_separate_async_on_cpu_takes_two_slots_one_engine_and_the_cpu_weight_sync(composed):
    env = {"OUT_DIR": "/tmp/arise_print_only", "TINY_DIR": "/tmp/arise_print_only/tiny", **PY}
    entry, _, cfg = composed("cpu_smoke_arise.sh", {**env, "TRAINER_MODE": "separate_async"})
    rollout = cfg.actor_rollout_ref.rollout
    assert cfg.ray_kwargs.ray_init.num_gpus == 2 and cfg.trainer.n_gpus_per_node == 1
    assert (rollout.nnodes, rollout.n_gpus_per_node) == (1, 1) and cfg.actor_rollout_ref.hybrid_engine is False
    assert rollout.checkpoint_engine.backend == "arise_cpu"
    assert rollout.checkpoint_engine.custom_backend_module == "recipe.arise.cpu.cpu_checkpoint_engine"
    assert cfg.trainer.v1.separate_async.parameter_sync_step == 1
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == cfg.data.train_batch_size == 4
    assert [f.level for f in _trainer_findings(cfg, entry)] == ["OK"]
    # two mini-batches per sync: each one micro-batch (4 prompts x 4 / 2), which verl asserts whole
    entry, _, pss2 = composed("cpu_smoke_arise.sh", {**env, "TRAINER_MODE": "separate_async", "PARAM_SYNC_STEP": "2"})
    assert pss2.actor_rollout_ref.actor.ppo_mini_batch_size == 2
    assert pss2.actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu == 8
    assert [f.level for f in _trainer_findings(pss2, entry)] == ["OK"]
    _, _, sync = composed("cpu_smoke_arise.sh", env)  # the other modes keep one slot and the naive sync
    assert sync.ray_kwargs.ray_init.num_gpus == 1
    assert sync.actor_rollout_ref.rollout.checkpoint_engine.backend == "naive"


def test_cpu_smoke_keeps_its_interface():
    env = {
        "OUT_DIR": "rel_out",
        "TINY_DIR": "/tmp/t",
        "STEPS": "3",
        "PHASE1_STEPS": "1",
        "SAVE_FREQ": "3",
        "BATCH": "2",
        "GROUP": "2",
        "LR": "0.5",
        "VERL_FILE_LOGGER_PATH": "m.jsonl",
        **PY,
    }
    _, overrides = _overrides("cpu_smoke_arise.sh", env)
    cfg = preflight.compose("recipe.arise.adapters.main_arise", overrides)
    assert cfg.trainer.total_training_steps == 3 and cfg.arise.phase1_steps == 1 and cfg.trainer.save_freq == 3
    assert cfg.data.train_batch_size == 2 and cfg.actor_rollout_ref.rollout.n == 2
    assert cfg.actor_rollout_ref.actor.optim.lr == 0.5
    assert cfg.actor_rollout_ref.model.path == "/tmp/t/model"
    assert cfg.trainer.default_local_dir == f"{os.getcwd()}/rel_out/checkpoints"  # relative OUT_DIR made absolute
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH == f"{os.getcwd()}/m.jsonl"
    entry, overrides = preflight.script_overrides(
        SCRIPTS / "cpu_smoke_arise.sh", ["trainer.val_before_train=True"], env=_clean_env(env)
    )
    assert overrides[-1] == "trainer.val_before_train=True"  # extra hydra arguments come last and win


@pytest.mark.parametrize(
    "script,env,message",
    [
        ("arise.sh", {"ABLATION": "nope", "MODEL_PATH": "m"}, "unknown ABLATION"),
        ("baseline.sh", {"METHOD": "ppo", "MODEL_PATH": "m"}, "unknown METHOD"),
        ("arise.sh", {"ROLLOUT": "trtllm", "MODEL_PATH": "m"}, "unknown ROLLOUT"),
        ("arise.sh", {"ROLLOUT": "sglang", "CPU": "1", "MODEL_PATH": "m"}, "ROLLOUT=vllm"),
    ],
)
def test_bad_choices_are_refused(script, env, message):
    proc = subprocess.run(
        ["bash", str(SCRIPTS / script)],
        env=_clean_env({**env, "PRINT_OVERRIDES": "1"}),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2 and message in proc.stderr


def test_mistyped_override_fails_to_compose():
    entry, overrides = _overrides("qwen3_4b_arise.sh", {})
    with pytest.raises(Exception, match="gat"):
        preflight.compose(entry, overrides + ["arise.selection.gat=0.3"])


def test_attention_and_padding_overrides(composed):
    _, overrides, _ = composed("qwen3_4b_arise.sh", {})
    entry = "recipe.arise.adapters.main_arise"
    flash = preflight.compose(entry, overrides + ["actor_rollout_ref.model.override_config.attn_implementation=x"])
    assert preflight.attention_backend(flash) == "x"  # plain key=value works after the script's ++
    # verl's default when nothing is set: flash_attention_2, which the README install lacks
    bare = preflight.compose(entry, ["actor_rollout_ref.rollout.name=vllm"])
    assert preflight.attention_backend(bare) == preflight.VERL_DEFAULT_ATTENTION
    assert preflight.VERL_DEFAULT_ATTENTION not in preflight.README_GPU_ATTENTION
    findings = preflight.check_backends(bare, check_runtime=True)
    if importlib.util.find_spec("flash_attn") is None:
        assert any(f.level == "ERROR" and "ATTN=sdpa" in f.fix for f in findings)


def _findings(composed, level: str, *extra: str) -> str:
    """The preflight's findings of one level for the paper's script plus ``extra`` overrides."""
    _, overrides, _ = composed("qwen3_4b_arise.sh", {})
    entry = "recipe.arise.adapters.main_arise"
    cfg = preflight.compose(entry, overrides + list(extra))
    return " ".join(f.what for f in preflight.check_config(cfg, entry, False, False) if f.level == level)


def test_validation_really_runs(composed):
    """Broken configs the GPU job would reject at start-up are ERRORs here."""

    def errors(*extra):
        return _findings(composed, "ERROR", *extra)

    # verl validate_config: 3 x 3 samples over 8 GPUs; ActorConfig.validate: batch < mini-batch
    assert "real_train_batch_size" in errors("data.train_batch_size=3", "actor_rollout_ref.rollout.n=3")
    assert "must be >= actor.ppo_mini_batch_size" in errors("data.train_batch_size=3")
    assert "loss_agg_mode" in errors("actor_rollout_ref.actor.loss_agg_mode=mean")  # ActorConfig
    assert "max_model_len" in errors("actor_rollout_ref.rollout.max_model_len=2048")
    assert "max_model_len is not set" in errors("actor_rollout_ref.rollout.max_model_len=null")
    assert "Unknown reward manager" in errors(
        "reward.reward_manager.source=register", "reward.reward_manager.name=nope"
    )
    assert "arise.selection.gate" in errors("arise.selection.gate=2")
    assert "actor_rollout_ref.rollout.name" in errors("actor_rollout_ref.rollout.name=???")  # mandatory


def test_eval_without_rollout_name_would_crash():
    """The evaluation tool sets rollout.name itself (verl's default is ???, MissingMandatoryValue)."""
    from recipe.arise.tools import evaluate

    args = evaluate.argparse.Namespace(
        data=["/x/a.parquet"],
        model="m",
        k=2,
        decoding="sampled",
        temperature=0.6,
        top_p=0.95,
        label="arise",
        out="/tmp/o",
        checkpoint=None,
        library=None,
        no_skills=False,
        overrides=[],
    )
    cfg = preflight.compose("recipe.arise.adapters.main_arise", evaluate.build_overrides(args, check_files=False))
    assert cfg.actor_rollout_ref.rollout.name == "vllm" and not preflight.missing_values(cfg)


# ------------------------------------------------------------------ the preflight CLI and estimator
QWEN3_4B = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 2560,
    "intermediate_size": 9728,
    "num_hidden_layers": 36,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "vocab_size": 151936,
    "max_position_embeddings": 262144,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


def _qwen_cfg(composed, *extra):
    _, overrides, _ = composed("qwen3_4b_arise.sh", {})
    return preflight.compose("recipe.arise.adapters.main_arise", overrides + list(extra))


def test_model_shape_from_config_json(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_4B))
    config = preflight.read_model_config(str(tmp_path))
    shape = preflight.model_shape(config, preflight.count_params(str(tmp_path), config))
    assert abs(shape.num_params / 4.02e9 - 1) < 0.01  # Qwen3-4B: 4.02 B parameters
    assert (shape.num_layers, shape.num_kv_heads, shape.head_dim) == (36, 8, 128)
    assert shape.max_position_embeddings == 262144 and not shape.params_counted
    assert preflight.read_model_config("no-such-org/no-such-model") is None  # no network, no error


def test_params_counted_from_safetensors_header(tmp_path):
    header = {"a": {"dtype": "BF16", "shape": [3, 4], "data_offsets": [0, 24]}, "__metadata__": {}}
    raw = json.dumps(header).encode()
    (tmp_path / "model.safetensors").write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0" * 24)
    assert preflight.count_params(str(tmp_path), {}) == 12


def test_estimate_paper_setup_fits(composed):
    shape = preflight.model_shape(QWEN3_4B)
    est = preflight.estimate_memory(_qwen_cfg(composed), shape, gpu_gib=80.0)
    assert est.level == "OK", [f.line() for f in est.findings]
    assert est.kv_bytes_per_token == 2 * 36 * 8 * 128 * 2  # K and V, 36 layers, 8 KV heads x 128, bf16
    assert abs(est.actor_gib - 4.02e9 * 16 / 8 / 2**30) < 0.1  # fp32 params + grads + AdamW over 8 GPUs
    assert abs(est.actor_rollout_gib - 4.02e9 * 12 / 8 / 2**30) < 0.1  # during rollout: no grads
    assert abs(est.vllm_weights_gib - 4.02e9 * 2 / 2**30) < 0.1
    assert est.max_model_len == 5376 and est.full_length_seqs >= 40 and est.seqs_per_replica == 64
    assert est.rollout_peak_gib < 80


def test_estimate_without_max_model_len_fails_at_half_memory(composed):
    """The issue's case: no max_model_len, vLLM sizes for 262,144 tokens at utilisation 0.5."""
    cfg = _qwen_cfg(composed, "actor_rollout_ref.rollout.max_model_len=null")
    est = preflight.estimate_memory(cfg, preflight.model_shape(QWEN3_4B), gpu_gib=80.0)
    assert est.max_model_len == 262144
    cfg = _qwen_cfg(
        composed, "actor_rollout_ref.rollout.max_model_len=null", "actor_rollout_ref.rollout.gpu_memory_utilization=0.5"
    )
    est = preflight.estimate_memory(cfg, preflight.model_shape(QWEN3_4B), gpu_gib=80.0)
    assert est.level == "ERROR"
    kv = [f for f in est.findings if "KV cache" in f.what]
    assert kv and "MAX_MODEL_LEN<=" in kv[0].fix


def test_estimate_one_gpu_does_not_fit(composed):
    cfg = _qwen_cfg(composed, "trainer.n_gpus_per_node=1", "data.train_batch_size=64")
    est = preflight.estimate_memory(cfg, preflight.model_shape(QWEN3_4B), gpu_gib=80.0)
    assert est.level == "ERROR"
    assert any("exceed the GPU" in f.what for f in est.findings)  # 64 GB actor state + 48 GB vLLM


# an H200's memory as nvidia-smi reports it: 143771 MiB
H200_GIB = 143771 / 1024


def test_estimate_one_h200_fits_the_paper_script(composed):
    """The paper's Qwen3-4B script with GPUS_PER_NODE=1 on one H200: during rollout the actor holds
    its fp32 weights and AdamW's m, v (12 bytes/param; verl frees the grads after each update), 44.9
    GiB + 0.6 x 140.4 GiB of vLLM fits; counting the grads too (16 bytes) refused it."""
    _, _, cfg = composed("qwen3_4b_arise.sh", {"GPUS_PER_NODE": "1"})
    assert cfg.trainer.n_gpus_per_node == 1
    est = preflight.estimate_memory(cfg, preflight.model_shape(QWEN3_4B), gpu_gib=H200_GIB)
    # no ERROR; its one WARNING: 512 rollouts share one engine's KV cache (they queue, slower)
    assert [f.level for f in est.findings] == ["WARNING"] and "queue" in est.findings[0].what, est.findings
    assert abs(est.actor_rollout_gib - 4.02e9 * 12 / 2**30) < 0.1  # fp32 weights + AdamW m, v
    assert abs(est.actor_gib - 4.02e9 * 16 / 2**30) < 0.1  # + fp32 grads while it trains
    assert abs(est.rollout_peak_gib - (1.0 + est.actor_rollout_gib + 0.6 * H200_GIB)) < 0.01
    assert est.train_peak_gib < H200_GIB
    # the offloads lower the rollout state only: verl loads both back for the update
    off = _qwen_cfg(
        composed,
        "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.fsdp_config.param_offload=True",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=True",
    )
    est = preflight.estimate_memory(off, preflight.model_shape(QWEN3_4B), gpu_gib=H200_GIB)
    assert est.actor_rollout_gib == 0 and abs(est.actor_gib - 4.02e9 * 16 / 2**30) < 0.1


def test_estimate_warns_when_the_kv_cache_is_small(composed):
    cfg = _qwen_cfg(composed, "actor_rollout_ref.rollout.gpu_memory_utilization=0.25")
    est = preflight.estimate_memory(cfg, preflight.model_shape(QWEN3_4B), gpu_gib=80.0)
    assert est.level == "WARNING" and "queue" in est.findings[0].what


# The preflight's command line, run as `python -m recipe.arise.tools.preflight ARGS` runs it, once per
# (args, environment) in one interpreter: runpy executes the module afresh as __main__ each time, the
# imports (verl, torch: ~8 CPU-s a process) are paid once. Then run_preflight on ARISE's entry, and
# whether any of it touched a GPU or Ray.
CLI_RUNS = r"""
import contextlib, io, json, os, runpy, sys, time, traceback
results = []
for args, env in json.loads(sys.argv[1]):
    os.environ.clear()
    os.environ.update(env)
    sys.argv = ["-m", *args]
    out, err = io.StringIO(), io.StringIO()
    started = time.time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module("recipe.arise.tools.preflight", run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    results.append({"returncode": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                    "seconds": time.time() - started})
from recipe.arise.tools import preflight
with contextlib.redirect_stdout(io.StringIO()):
    preflight.run_preflight("recipe.arise.adapters.main_arise", ["actor_rollout_ref.rollout.name=vllm"])
import torch, ray
print(json.dumps({"runs": results, "cuda": torch.cuda.is_initialized(), "ray": ray.is_initialized(),
                  "constants_ppo": "verl.trainer.constants_ppo" in sys.modules}))
"""


@pytest.fixture(scope="module")
def preflight_cli(tmp_path_factory):
    """The preflight CLI on the paper's script (a fake Qwen3-4B config.json, one-row data files), in
    one interpreter (CLI_RUNS): a config error, the 8-GPU estimate, one 80 GB GPU, one H200."""
    tmp_path = tmp_path_factory.mktemp("preflight_cli")
    model = tmp_path / "qwen3_4b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN3_4B))
    data = tmp_path / "data"
    from recipe.arise.data_prep.common import make_row, write_parquet_atomic

    for name in ("train/deepscaler", "eval/aime24", "eval/aime25", "eval/amc23"):  # the preflight reads the rows
        write_parquet_atomic([make_row("t", "1 + 1?", "2", split="test", index=0)], data / f"{name}.parquet")
    # SAVE_FREQ=-1: no checkpoint, so that the disk check does not depend on this machine's free space
    env = {"MODEL_PATH": str(model), "DATA_DIR": str(data), "CKPT_DIR": str(tmp_path / "ckpt"), "SAVE_FREQ": "-1"}
    one_gpu = {**env, "GPUS_PER_NODE": "1"}
    runs = [
        # first: its seconds include the imports, as a person's first preflight does
        (["run_scripts/qwen3_4b_arise.sh", "data.train_batch_size=3"], env),
        (["--gpu-mem-gib", "80", "run_scripts/qwen3_4b_arise.sh"], env),
        (["--gpu-mem-gib=80", "run_scripts/qwen3_4b_arise.sh"], one_gpu),
        ([f"--gpu-mem-gib={H200_GIB}", "run_scripts/qwen3_4b_arise.sh"], one_gpu),
    ]
    runs = [(args, _clean_env(run_env)) for args, run_env in runs]
    proc = subprocess.run(
        [sys.executable, "-c", CLI_RUNS, json.dumps(runs)],
        cwd=REPO,
        env=_clean_env({}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return [SimpleNamespace(**run) for run in result.pop("runs")], result


def test_preflight_cli_on_the_paper_script(preflight_cli):
    (error, eight, one_80, one_h200), _ = preflight_cli
    # a config error surfaces in seconds, with the override to change
    assert error.returncode == 1 and "train_batch_size (3)" in error.stdout and "verdict: ERROR" in error.stdout
    assert error.seconds < 120
    assert eight.returncode == 0, eight.stdout + eight.stderr
    assert "memory per GPU (80.0 GiB" in eight.stdout and "verdict: OK" in eight.stdout
    assert "4.02 B params" in eight.stdout
    # one 80 GB GPU: the estimate says ERROR and what to change; one H200 fits
    assert one_80.returncode == 1 and "exceed the GPU" in one_80.stdout and "->" in one_80.stdout
    assert one_h200.returncode == 0 and "verdict: WARNING" in one_h200.stdout
    assert "exceed the GPU" not in one_h200.stdout


def test_preflight_touches_no_gpu_and_no_ray(preflight_cli):
    """Neither the CLI runs nor run_preflight on ARISE's entry initialise CUDA or Ray, or import verl's
    constants_ppo (it queries the device capability on import)."""
    _, after = preflight_cli
    assert after == {"cuda": False, "ray": False, "constants_ppo": False}


def test_preflight_warns_when_train_manager_has_no_room_for_the_skill_line(composed):
    """Found on the CPU run: with a 24-token response every selected skill went unaided."""

    def warnings(*extra):
        return _findings(composed, "WARNING", *extra)

    assert "train_manager" not in warnings("arise.selection.train_manager=true")  # 4,096-token responses
    assert "train_manager" in warnings("arise.selection.train_manager=true", "data.max_response_length=24")
    assert "train_manager" not in warnings("data.max_response_length=24")  # off: the skill is in the prompt


def test_a_ray_start_timeout_is_launched_again_once_and_its_processes_stopped(tmp_path):
    """Ray waits a fixed 30 s for its raylet (an overloaded machine can miss it): run_main launches
    once more, after stopping the failed attempt's processes (ray.init leaves them running)."""
    attempts = tmp_path / "attempts"
    fake = tmp_path / "python"  # stands in for "$PYTHON -m ENTRY": a leftover "raylet", then Ray's error
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'[ "$1 $2" = "-m recipe.arise.adapters.main_arise" ] || exec {sys.executable} "$@"\n'  # the launcher
        f'echo x >> "{attempts}"\n'
        f'if [ "$(wc -l < "{attempts}")" = 1 ]; then\n'
        f'  (exec -a raylet sleep 300) & echo $! > "{tmp_path}/raylet.pid"\n'
        '  echo "Exception: The current node timed out during startup. This could happen ..."; exit 1\n'
        "fi\n"
        'echo "Training Progress: 100%"\n'
    )
    fake.chmod(0o755)
    log = tmp_path / "run.log"
    script = f'source "{SCRIPTS}/common.sh" >/dev/null\nrun_main recipe.arise.adapters.main_arise\n'
    env = _clean_env({"MODEL_PATH": "m", "PYTHON": str(fake), "SKIP_PREFLIGHT": "1", "LOG_FILE": str(log)})
    env["VERL_FILE_LOGGER_PATH"] = str(tmp_path / "metrics.jsonl")
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert attempts.read_text().count("x") == 2
    assert "launching again" in proc.stdout
    assert "timed out during startup" in (tmp_path / "run.launch1.log").read_text()  # the failed attempt's
    pid = int((tmp_path / "raylet.pid").read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2]

    # any other failure is not retried
    attempts.unlink()
    fake.write_text(
        f'#!/usr/bin/env bash\n[ "$1 $2" = "-m recipe.arise.adapters.main_arise" ] || exec {sys.executable} "$@"\n'
        f'echo x >> "{attempts}"\necho "ValueError: bad"; exit 1\n'
    )
    proc = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 1 and attempts.read_text().count("x") == 1
