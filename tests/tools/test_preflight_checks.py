"""The preflight's run-folder checks on the paper script's composed config, with tiny model
``config.json`` files and checkpoint folders in tmp_path: LongRoPE, free disk, what a resume
continues and whether its settings changed, retention, the metrics file, the validation batch."""

import copy
import io
import json
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe.arise.tools import preflight

REPO = Path(__file__).resolve().parents[2]
ENTRY = "recipe.arise.adapters.main_arise"

PHI4_MINI = {  # the fields of microsoft/Phi-4-mini-instruct's config.json the checks read
    "architectures": ["Phi3ForCausalLM"],
    "model_type": "phi3",
    "hidden_size": 3072,
    "intermediate_size": 8192,
    "num_hidden_layers": 32,
    "num_attention_heads": 24,
    "num_key_value_heads": 8,
    "vocab_size": 200064,
    "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096,
    "partial_rotary_factor": 0.75,
    "rope_scaling": {"type": "longrope", "long_factor": [1.0] * 48, "short_factor": [1.0] * 48},
    "tie_word_embeddings": True,
}


@pytest.fixture(scope="module")
def base(paper_script_overrides):
    entry, overrides = paper_script_overrides
    return preflight.compose(entry, overrides)


def _cfg(base, **updates):
    cfg = copy.deepcopy(base)
    for key, value in updates.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
    return cfg


# ------------------------------------------------------------------------------------------ LongRoPE
def test_longrope_detected_in_both_config_layouts(tmp_path):
    assert preflight.longrope(PHI4_MINI) == 4096
    v5 = {k: v for k, v in PHI4_MINI.items() if k not in ("rope_scaling", "original_max_position_embeddings")}
    v5["rope_parameters"] = {"rope_type": "longrope", "original_max_position_embeddings": 4096, "rope_theta": 1e4}
    assert preflight.longrope(v5) == 4096  # transformers 5 writes rope_parameters
    assert preflight.longrope({"rope_scaling": {"type": "yarn", "original_max_position_embeddings": 4096}}) is None
    assert preflight.longrope({"hidden_size": 8}) is None
    (tmp_path / "config.json").write_text(json.dumps(PHI4_MINI))
    assert preflight.longrope(preflight.read_model_config(str(tmp_path))) == 4096


def test_longrope_beyond_the_original_positions_is_an_error(base, monkeypatch):
    monkeypatch.delenv(preflight.ALLOW_LONGROPE, raising=False)
    long = _cfg(base, actor_rollout_ref__rollout__max_model_len=5376)
    (finding,) = preflight.check_longrope(long, PHI4_MINI)
    assert finding.level == "ERROR" and "long factors" in finding.what
    assert "MAX_MODEL_LEN<=4096" in finding.fix and "MAX_RESPONSE=2816" in finding.fix
    short = _cfg(base, actor_rollout_ref__rollout__max_model_len=4096)
    assert [f.level for f in preflight.check_longrope(short, PHI4_MINI)] == ["OK"]
    # verl's rollout correction, or the explicit override: a warning
    corrected = _cfg(long, algorithm__rollout_correction__rollout_is="token")
    assert [f.level for f in preflight.check_longrope(corrected, PHI4_MINI)] == ["WARNING"]
    monkeypatch.setenv(preflight.ALLOW_LONGROPE, "1")
    assert [f.level for f in preflight.check_longrope(long, PHI4_MINI)] == ["WARNING"]
    assert preflight.check_longrope(long, {"hidden_size": 8}) == []  # not LongRoPE: nothing to say


def test_preflight_refuses_phi4_mini_with_4096_token_responses(tmp_path, base, monkeypatch):
    monkeypatch.delenv(preflight.ALLOW_LONGROPE, raising=False)
    (tmp_path / "config.json").write_text(json.dumps(PHI4_MINI))
    _, overrides = preflight.script_overrides(
        REPO / "run_scripts" / "phi4_mini_arise.sh",
        env={"PATH": os.environ["PATH"], "MODEL_PATH": str(tmp_path), "MAX_RESPONSE": "4096", "PYTHON": "python3"},
    )
    out = io.StringIO()
    assert preflight.run_preflight(ENTRY, overrides, gpu_mem_gib=80, check_paths=False, out=out) == 1
    assert "ERROR   LongRoPE (original_max_position_embeddings 4096) with rollout.max_model_len 5376" in out.getvalue()


# ------------------------------------------------------------------------------------------ disk
def test_disk_needs_the_kept_checkpoints(tmp_path, base):
    cfg = _cfg(base, trainer__default_local_dir=str(tmp_path / "ckpt"))
    params = 4_000_000_000
    one = preflight.checkpoint_bytes(cfg, params)
    assert one == params * 12  # fp32 model + AdamW m, v
    assert (
        preflight.checkpoint_bytes(
            _cfg(cfg, actor_rollout_ref__actor__checkpoint__save_contents=["model", "optimizer", "hf_model"]), params
        )
        == params * 14
    )
    (ok,) = preflight.check_disk(cfg, params, free_bytes=3 * one)  # keeps 3 (common.sh)
    assert ok.level == "OK" and "3 checkpoint(s)" in ok.what
    (short,) = preflight.check_disk(cfg, params, free_bytes=3 * one - 1)
    assert short.level == "ERROR" and "KEEP_CKPTS" in short.fix
    # keeping 1: verl removes the old one after the new one is saved, so two exist at once
    (one_kept,) = preflight.check_disk(_cfg(cfg, trainer__max_actor_ckpt_to_keep=1), params, free_bytes=2 * one)
    assert one_kept.level == "OK" and "2 checkpoint(s)" in one_kept.what
    # resumed at step 1950 of 2000 with save_freq 100: one save left (step 2000)
    (tmp_path / "ckpt" / "global_step_1950" / "actor").mkdir(parents=True)
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("1950")
    found = preflight.check_disk(cfg, params, free_bytes=one)
    assert [f.level for f in found] == ["INFO", "OK"] and "1 checkpoint(s)" in found[1].what
    assert "earlier checkpoint" in found[0].what  # verl's retention never removes an earlier launch's
    assert preflight.check_disk(_cfg(cfg, trainer__save_freq=-1), params, free_bytes=0) == []


# ------------------------------------------------------------------------------------------ resume
def _checkpoint(root: Path, step: int) -> Path:
    folder = root / f"global_step_{step}"
    (folder / "actor").mkdir(parents=True)
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return folder


def test_resume_refuses_changed_settings(tmp_path, base, monkeypatch):
    monkeypatch.delenv(preflight.ALLOW_CONFIG_CHANGE, raising=False)
    root = tmp_path / "ckpt"
    cfg = _cfg(base, trainer__default_local_dir=str(root))
    assert [f.level for f in preflight.check_resume(cfg)] == ["OK"]  # nothing to resume: a new run
    assert preflight.record_launch(cfg) == root / preflight.RUN_CONFIG
    assert json.loads((root / "launches.jsonl").read_text())["resumed_step"] == 0
    _checkpoint(root, 300)

    same = preflight.check_resume(cfg)
    assert [f.level for f in same] == ["INFO", "OK"]
    assert "global_step_300 (step 300 of 2000)" in same[0].what and preflight.RUN_CONFIG in same[0].what

    gate = preflight.check_resume(_cfg(cfg, arise__selection__gate=0.25))
    assert gate[-1].level == "ERROR" and "arise.selection.gate: 0.35 -> 0.25" in gate[-1].what
    assert "EXPERIMENT=" in gate[-1].fix and preflight.ALLOW_CONFIG_CHANGE in gate[-1].fix
    algo = preflight.check_resume(_cfg(cfg, algorithm__norm_adv_by_std_in_grpo=False))
    assert algo[-1].level == "ERROR" and "algorithm.norm_adv_by_std_in_grpo" in algo[-1].what
    model = preflight.check_resume(_cfg(cfg, actor_rollout_ref__model__path="microsoft/Phi-4-mini-instruct"))
    assert model[-1].level == "ERROR" and "actor_rollout_ref.model.path" in model[-1].what
    # how fast, not what is learned: no refusal
    timing = _cfg(cfg, arise__summary__timeout_s=60, arise__replay_poll_s=1.0, trainer__total_training_steps=3000)
    assert preflight.check_resume(timing)[-1].level == "OK"

    monkeypatch.setenv(preflight.ALLOW_CONFIG_CHANGE, "1")
    allowed = preflight.check_resume(_cfg(cfg, arise__selection__gate=0.25))
    assert allowed[-1].level == "WARNING" and "arise.selection.gate" in allowed[-1].what


def test_resume_prefers_the_steps_own_config(tmp_path, base, monkeypatch):
    monkeypatch.delenv(preflight.ALLOW_CONFIG_CHANGE, raising=False)
    root = tmp_path / "ckpt"
    cfg = _cfg(base, trainer__default_local_dir=str(root))
    preflight.record_launch(cfg)
    folder = _checkpoint(root, 100)
    (folder / "arise").mkdir()
    OmegaConf.save(_cfg(cfg, arise__selection__gate=0.5), folder / preflight.STEP_CONFIG)
    found = preflight.check_resume(cfg)
    assert preflight.STEP_CONFIG in found[0].what
    assert found[-1].level == "ERROR" and "arise.selection.gate: 0.5 -> 0.35" in found[-1].what


def test_resume_without_recorded_settings_and_other_modes(tmp_path, base):
    root = tmp_path / "ckpt"
    cfg = _cfg(base, trainer__default_local_dir=str(root))
    _checkpoint(root, 20)
    (info,) = preflight.check_resume(cfg)  # e.g. launched with SKIP_PREFLIGHT=1: said, not refused
    assert info.level == "INFO" and "not recorded" in info.what
    (disabled,) = preflight.check_resume(_cfg(cfg, trainer__resume_mode="disable"))
    assert disabled.level == "INFO" and "starts from step 0" in disabled.what
    assert preflight.check_resume(_cfg(cfg, trainer__val_only=True)) == []  # evaluation resumes on purpose
    # a resume_path step whose actor/ verl's retention removed: refused before any GPU is allocated
    pruned = root / "global_step_10"
    (pruned / "arise").mkdir(parents=True)
    paths = preflight.check_data_paths(
        _cfg(cfg, trainer__resume_mode="resume_path", trainer__resume_from_path=str(pruned))
    )
    assert any(f.level == "ERROR" and "holds no actor/" in f.what for f in paths)


# ------------------------------------------------------------------------------------------ run folder
def test_run_folder_checks(base):
    assert {f.level for f in preflight.check_run_folder(base)} == {"OK"}
    unbounded = preflight.check_run_folder(_cfg(base, trainer__max_actor_ckpt_to_keep=None))
    assert any(f.level == "WARNING" and "max_actor_ckpt_to_keep" in f.what for f in unbounded)
    no_path = _cfg(base, ray_kwargs__ray_init__runtime_env__env_vars__VERL_FILE_LOGGER_PATH="")
    assert any(f.level == "WARNING" and "truncates" in f.what for f in preflight.check_run_folder(no_path))
    whole = preflight.check_run_folder(_cfg(base, data__val_batch_size=None))
    assert any(f.level == "WARNING" and "val_batch_size" in f.what for f in whole)
