"""The python tool through verl's own tool loading (the yaml ToolAgentLoop reads)."""

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from verl.tools.tool_registry import initialize_tools_from_config

from recipe.arise.adapters.python_tool import PythonTool, tool_step_metrics

YAML = Path(__file__).resolve().parents[2] / "recipe/arise/config/python_tool.yaml"


def _tool(tmp_path, **config) -> PythonTool:
    spec = yaml.safe_load(YAML.read_text())
    spec["tools"][0]["config"].update(config)
    path = tmp_path / "tools.yaml"
    path.write_text(yaml.safe_dump(spec))
    (tool,) = initialize_tools_from_config(str(path))
    return tool


def test_verl_loads_the_tool_from_the_yaml_and_runs_code(tmp_path):
    (tool,) = initialize_tools_from_config(str(YAML))
    assert isinstance(tool, PythonTool) and tool.name == "python"
    assert tool.tool_schema.function.parameters.required == ["code"]
    assert tool.limits.wall_s == 10 and tool.isolation in ("bwrap", "none")

    agent_data = SimpleNamespace(extra_fields={})

    async def calls():
        instance_id, _ = await tool.create()
        ok = await tool.execute(instance_id, {"code": "import sympy\nprint(sympy.isprime(97))"}, agent_data=agent_data)
        bad = await tool.execute(instance_id, {"code": "raise KeyError('k')"}, agent_data=agent_data)
        empty = await tool.execute(instance_id, {}, agent_data=agent_data)
        await tool.release(instance_id)
        return ok, bad, empty

    (ok_resp, ok_reward, ok_metrics), (bad_resp, _, bad_metrics), (empty_resp, _, _) = asyncio.run(calls())
    assert ok_resp.text == "True" and ok_reward == 0.0
    assert ok_metrics["tool_error"] == 0.0 and ok_metrics["tool_s"] > 0 and ok_metrics["isolation"] == tool.isolation
    assert "KeyError: 'k'" in bad_resp.text and bad_resp.text.endswith("Error: exit status 1")
    assert bad_metrics["tool_error"] == 1.0 and bad_metrics["reason"] == "error"
    assert empty_resp.text.startswith("Error: the python tool needs")
    extra = agent_data.extra_fields
    assert (extra["python_tool_calls"], extra["python_tool_errors"]) == (3, 2) and extra["python_tool_s"] > 0


def test_limits_come_from_the_yaml(tmp_path):
    tool = _tool(tmp_path, isolation="none", limits={"wall_s": 1, "max_output_bytes": 10})
    response, _, metrics = asyncio.run(tool.execute("i", {"code": "print('x' * 100)"}))
    assert response.text == "x" * 10 + "\nError: output truncated at 10 bytes (the run was stopped)"
    assert metrics["reason"] == "output" and tool.isolation == "none"
    response, _, metrics = asyncio.run(tool.execute("i", {"code": "while True: pass"}))
    assert response.text == "Error: time limit of 1 s exceeded (the run was stopped)"


def test_bad_config_is_named(tmp_path):
    with pytest.raises(ValueError, match="walltime"):
        _tool(tmp_path, limits={"walltime": 1})
    with pytest.raises(ValueError, match="max_concurent"):
        _tool(tmp_path, max_concurent=2)


def test_concurrent_calls_do_not_block_the_event_loop(tmp_path):
    tool = _tool(tmp_path, isolation="none", max_concurrent=2)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        task = asyncio.create_task(ticker())
        # each call takes >= 0.3 s: an event loop blocked by the calls would tick at most between them
        code = "import time; time.sleep(0.3); print({})"
        results = await asyncio.gather(*(tool.execute("i", {"code": code.format(i)}) for i in range(3)))
        task.cancel()
        return ticks, [r[0].text for r in results]

    ticks, texts = asyncio.run(main())
    # >= 0.6 s of calls (3 on 2 slots) is >= 12 ticks of 0.05 s while the loop runs; blocked, <= 3
    assert texts == ["0", "1", "2"] and ticks >= 6, ticks


def test_queued_calls_leave_the_default_executor_free(tmp_path, monkeypatch):
    """verl tokenizes in the event loop's default executor (run_in_executor(None, ...)): calls waiting
    for a sandbox slot must not sit in its threads, or a queue of slow calls stalls every trajectory."""
    from concurrent.futures import ThreadPoolExecutor

    from recipe.arise.core import sandbox

    tool = _tool(tmp_path, isolation="none", max_concurrent=1)
    real = sandbox.run_python

    def slow(code, limits, isolation):
        time.sleep(0.4)
        return real("pass", limits, isolation=isolation)

    monkeypatch.setattr(sandbox, "run_python", slow)

    async def main():
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=4))  # a 2-core machine's default is 6
        calls = [asyncio.create_task(tool.execute("i", {"code": "pass"})) for _ in range(8)]
        await asyncio.sleep(0.1)  # the calls are queued for the one slot
        start = time.monotonic()
        await loop.run_in_executor(None, lambda: None)  # what verl's tokenization does
        waited = time.monotonic() - start
        results = await asyncio.gather(*calls)
        return waited, [r[0].text for r in results]

    waited, texts = asyncio.run(main())
    assert texts == ["(no output)"] * 8
    # before the fix it waited behind the queued calls (~1.3 s here); now it starts at once
    assert waited < 0.25, waited


def test_step_metrics_from_the_batch_fields():
    extras = [
        {"python_tool_calls": 2, "python_tool_errors": 1, "python_tool_s": 1.0},
        {"python_tool_calls": 0, "python_tool_errors": 0, "python_tool_s": 0.0},
        {"python_tool_calls": 1, "python_tool_errors": 0, "python_tool_s": 0.5},
        {},  # a trajectory that never called the tool carries no counter
    ]
    extras[2]["tool_calls_malformed"] = 2  # the tool agent's count of calls that reached no tool
    expected = {
        "arise/tool_calls": 0.75,
        "arise/tool_error_rate": 1 / 3,
        "arise/tool_s": 0.375,
        "arise/tool_calls_malformed": 0.5,
    }
    assert tool_step_metrics(extras) == expected
    assert tool_step_metrics([{}, None]) == {}  # single-turn: no tool metrics at all
    zero = {"arise/tool_calls": 0.0, "arise/tool_error_rate": 0.0, "arise/tool_s": 0.0}
    assert tool_step_metrics([{}, None], tool_run=True) == {**zero, "arise/tool_calls_malformed": 0.0}


def test_a_tool_run_whose_model_never_calls_the_tool_logs_0_and_fails_the_verdict(monkeypatch, capsys):
    """verl carries no counter for a trajectory that never called the tool: with a tool agent the
    trainer still logs arise/tool_calls, 0, every step, so the verdict's "never called" FAIL can fire."""
    from omegaconf import OmegaConf
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    from recipe.arise.adapters.rollout_failures import FailureTally
    from recipe.arise.adapters.trainers import ARISETrainer
    from recipe.arise.tools import verdict

    monkeypatch.setattr(PPOTrainerSync, "_compute_metrics", lambda self, *a, **kw: None, raising=False)
    monkeypatch.setattr(ARISETrainer, "_extra_fields", lambda self, batch: [{"turn_scores": []} for _ in range(4)])
    trainer = object.__new__(ARISETrainer)
    trainer._arise_metrics, trainer.library, trainer.total_training_steps = {}, None, 3
    rollout = {"agent": {"default_agent_loop": "arise_tool_agent"}, "multi_turn": {"enable": True}}
    trainer.config = OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}})
    trainer.train_dataset = trainer.val_dataset = SimpleNamespace(rows_dropped=0)
    trainer.replay_buffer, trainer._val_failures = (
        SimpleNamespace(failures={"train": FailureTally()}, refilled_step=0),
        None,
    )
    steps = {}
    for step in (1, 2, 3):
        steps[step] = {"critic/score/mean": 0.5, "timing_s/step": 1.0}
        ARISETrainer._compute_metrics(trainer, None, steps[step], {}, global_steps=step, epoch=0)
    assert steps[3]["arise/tool_calls"] == 0.0 and steps[3]["arise/tool_calls_malformed"] == 0.0
    assert "| tool calls 0.00 (malformed 0.00) |" in capsys.readouterr().out  # the console line says so
    checks = verdict.judge(steps, "tiny", expect="grpo")
    (check,) = [c for c in checks if c.metric == "arise/tool_calls"]
    assert check.status == "FAIL" and verdict.outcome(checks)[0] == "FAIL"


def test_the_tool_counters_pass_the_trajectory_record_reader():
    """The counters travel in the same extra fields as ARISE's record, whose reader refuses unknown
    arise_* keys: the tool's own keys must not take that prefix (the first tool run failed on it)."""
    from recipe.arise.adapters.python_tool import EXTRA_CALLS, EXTRA_ERRORS, EXTRA_SECONDS
    from recipe.arise.core.trajectory import TrajectoryInfo

    extra = {**TrajectoryInfo(phase=2).to_extra_fields(), EXTRA_CALLS: 1, EXTRA_ERRORS: 0, EXTRA_SECONDS: 0.1}
    assert TrajectoryInfo.from_extra_fields(extra).phase == 2
