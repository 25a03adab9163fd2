"""The trainer's metrics of ``arise_env_agent``'s episodes (recipe/arise/adapters/trainer_metrics.py):
arise/env_* every step with episodes, ARISE on (every generated episode, tests/adapters/
test_reward_manager.py) or off (the trained batch's), on the console line too; none in a math run;
the verdict counts none of them as a sign of ARISE."""

from types import SimpleNamespace

from omegaconf import OmegaConf

from recipe.arise.adapters.trainer_metrics import console_line, env_step_metrics


def episode(won, task_type="cooking", failed=None, turns=4, invalid=1, seconds=2.0, wait_s=0.0):
    return {
        "won": won,
        "turns": turns,
        "invalid_actions": invalid,
        "seconds": seconds,
        "wait_s": wait_s,
        "task_type": task_type,
        "failed": failed,
        "stop": "done",
        "transcript": "",
    }


EXTRAS = [
    {"env": episode(True), "arise_phase": 1},
    {"env": episode(False, failed="timeout: step took over 60.0 s", turns=2, invalid=3, seconds=60.0)},
    {"env": episode(True, "coin", turns=6, invalid=2, seconds=1.0, wait_s=2.0)},
    {"env": episode(False, "coin", turns=8, invalid=0, seconds=1.0)},
]


def test_episode_metrics_success_turns_invalid_seconds_failed_and_per_task_type():
    m = env_step_metrics(EXTRAS)
    assert m == {
        "arise/env_success": 0.5,
        "arise/env_turns": 5.0,
        "arise/env_invalid_actions": 1.5,
        "arise/env_s": 16.0,
        "arise/env_wait_s": 0.5,
        "arise/env_failed": 1.0,
        "arise/env_success/coin": 0.5,
        "arise/env_success/cooking": 0.5,
    }
    assert env_step_metrics([{}, None, {"arise_phase": 1}]) == {}  # a math run: none


def test_the_trainer_logs_them_with_arise_off_and_the_console_line_shows_them(monkeypatch, capsys):
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from recipe.arise.adapters.rollout_failures import FailureTally
    from recipe.arise.adapters.trainers import ARISETrainer
    from recipe.arise.tools import verdict

    monkeypatch.setattr(PPOTrainerSync, "_compute_metrics", lambda self, *a, **kw: None, raising=False)
    monkeypatch.setattr(ARISETrainer, "_extra_fields", lambda self, batch: EXTRAS)
    trainer = object.__new__(ARISETrainer)
    trainer._arise_metrics, trainer.library, trainer.total_training_steps = {}, None, 3
    rollout = {"agent": {"default_agent_loop": "arise_env_agent"}, "multi_turn": {"enable": False}}
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}})
    trainer.train_dataset = trainer.val_dataset = SimpleNamespace(rows_dropped=0)
    trainer.replay_buffer = SimpleNamespace(failures={"train": FailureTally()}, refilled_step=0)
    trainer._val_failures = None
    steps = {}
    for step in (1, 2):
        steps[step] = {"critic/score/mean": 0.5, "timing_s/step": 1.0}
        ARISETrainer._compute_metrics(trainer, None, steps[step], {}, global_steps=step, epoch=0)
    assert steps[2]["arise/env_success"] == 0.5 and steps[2]["arise/env_success/coin"] == 0.5
    assert "| env success 0.50 failed 1 |" in capsys.readouterr().out
    # plain GRPO in an environment: no arise/* key it logs is a sign of ARISE
    assert not [k for k in steps[2] if k.startswith("arise/") and not verdict.is_run_key(k)], sorted(steps[2])
    assert verdict.judge(steps, "tiny", expect="grpo")[0].status == "OFF"


def test_the_console_line_of_an_arise_step_shows_them():
    metrics = {
        "arise/phase": 2.0,
        "arise/trajectories": 4.0,
        "arise/acc": 0.5,
        "arise/reward_mean": 0.7,
        "arise/skill_use_rate": 0.5,
        "arise/gate_pass_rate": 0.6,
        "arise/mixed_group_rate": 0.1,
        "arise/summary_parsed": 1,
        "arise/summary_attempts": 1,
        "arise/cache_size": 8,
        "arise/reservoir_size": 2,
        "arise/new_skills": 1,
        **env_step_metrics(EXTRAS),
    }
    assert "| env success 0.50 failed 1 |" in console_line(3, 5, metrics)
    assert "env success" not in console_line(3, 5, {k: v for k, v in metrics.items() if "env" not in k})


def test_with_arise_on_the_steps_own_episode_metrics_are_kept(monkeypatch):
    """ARISE's step metrics count every generated episode; the trained batch's do not replace them."""
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from recipe.arise.adapters.rollout_failures import FailureTally
    from recipe.arise.adapters.trainers import ARISETrainer

    monkeypatch.setattr(PPOTrainerSync, "_compute_metrics", lambda self, *a, **kw: None, raising=False)
    monkeypatch.setattr(ARISETrainer, "_extra_fields", lambda self, batch: EXTRAS)  # success 0.5 there
    trainer = object.__new__(ARISETrainer)
    trainer._arise_metrics = {"arise/env_success": 0.9, "arise/env_failed": 0.0}
    trainer.library, trainer.total_training_steps = None, 3
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"multi_turn": {"enable": False}}}})
    trainer.train_dataset = trainer.val_dataset = SimpleNamespace(rows_dropped=0)
    trainer.replay_buffer = SimpleNamespace(failures={"train": FailureTally()}, refilled_step=0)
    trainer._val_failures = None
    metrics = {"critic/score/mean": 0.5, "timing_s/step": 1.0}
    ARISETrainer._compute_metrics(trainer, None, metrics, {}, global_steps=1, epoch=0)
    assert metrics["arise/env_success"] == 0.9 and "arise/env_success/coin" not in metrics
