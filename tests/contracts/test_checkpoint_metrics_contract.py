"""What the trainer's checkpoint and metrics overrides rely on in verl's v1 trainer, read from the
stack's source (conftest.py: ``[cpu]`` / ``[gpu]``) (recipe/arise/adapters: ``ARISETrainer``'s
``_load_checkpoint``, ``_save_checkpoint`` and ``_compute_metrics``, which call ``super()`` first
or last; their signatures: test_trainer_overrides_contract.py):

- ``_load_checkpoint`` runs once, as the last step of the trainer's set-up (the Ray workers and
  replicas exist, so the override can start the LibraryReplica actor), never from ``fit``; it leaves
  ``self.global_steps`` at the resumed step, 0 without one, and the step's folder is
  ``<default_local_dir>/global_step_<global_steps>`` (relative roots taken from the working
  directory), or ``resume_from_path`` (the override recomputes it to find ``arise/library.parquet``);
- ``_save_checkpoint`` runs after the step (the step's library maintenance is done) and before
  ``global_steps`` advances; it writes into that same folder without clearing it, and writes
  ``latest_checkpointed_iteration.txt`` last, so the ``arise/`` files the override writes first
  exist before a resume can pick the step; verl's retention removes only the ``actor/`` path it
  saved, so ``arise/`` stays;
- ``_compute_metrics`` runs once per step with the dict verl then logs (what the override adds is
  logged), before the step's batch leaves the transfer queue (the override reads its
  ``response_mask``), after verl added ``timing_s/step`` and ``critic/score/mean`` (the console line).

The public ``CheckpointCallback.on_save`` hook runs after the tracker is written, too late for the
library (a crash in between leaves a resumable step without it), and there is no load hook: hence
the overrides.
"""

import ast
import json

import pytest

BASE = "trainer/ppo/v1/trainer_base.py"


def _method(text: str, cls: str, name: str) -> ast.FunctionDef:
    tree = ast.parse(text)
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    found = next((n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
    assert found is not None, f"verl's {cls} no longer defines {name}"
    return found


def _at(fn: ast.AST, predicate) -> list[tuple[int, int]]:
    """Source positions of the nodes of ``fn`` that satisfy ``predicate`` (unparsed text)."""
    return sorted((n.lineno, n.col_offset) for n in ast.walk(fn) if hasattr(n, "lineno") and predicate(n))


def _calls(fn: ast.AST, text: str) -> list[tuple[int, int]]:
    return _at(fn, lambda n: isinstance(n, ast.Call) and ast.unparse(n.func) == text)


@pytest.fixture
def trainer(source):
    return lambda name: _method(source(BASE), "PPOTrainer", name)


def test_load_checkpoint_runs_once_at_the_end_of_set_up(trainer):
    setup = trainer("_setup")
    (load,) = _calls(setup, "self._load_checkpoint")
    manager = _at(setup, lambda n: isinstance(n, ast.Attribute) and ast.unparse(n) == "self.checkpoint_manager")
    assert manager and manager[0] < load, "the replicas and the checkpoint engine exist before the load"
    assert not _calls(trainer("fit"), "self._load_checkpoint")
    assert _calls(trainer("init"), "self._setup")


def test_load_checkpoint_sets_global_steps_from_the_step_folder(trainer):
    load = trainer("_load_checkpoint")
    assert ast.unparse(load.body[0]) == "self.global_steps = 0"
    text = ast.unparse(load)
    assert "checkpoint_folder = self.config.trainer.default_local_dir" in text
    assert "checkpoint_folder = os.path.join(working_dir, checkpoint_folder)" in text
    assert "global_step_folder = find_latest_ckpt_path(checkpoint_folder)" in text
    assert "global_step_folder = self.config.trainer.resume_from_path" in text
    assert "global_step_folder = os.path.join(working_dir, global_step_folder)" in text
    assert "self.global_steps = int(global_step_folder.split('global_step_')[-1])" in text


FIND_LATEST = r"""
import os, sys
from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path
root = sys.argv[1]
os.makedirs(os.path.join(root, "global_step_7"))
with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
    f.write("7")
print(repr(find_latest_ckpt_path(root)))
"""


def test_the_latest_checkpoint_is_the_tracked_global_step_folder(stack, tmp_path):
    root = tmp_path / stack.name
    out = stack.run(FIND_LATEST, str(root)).strip().splitlines()[-1]
    assert out == repr(str(root / "global_step_7"))


def test_save_checkpoint_writes_the_step_folder_and_the_tracker_last(trainer):
    save = trainer("_save_checkpoint")
    text = ast.unparse(save)
    assert (
        "local_global_step_folder = os.path.join(self.config.trainer.default_local_dir, "
        "f'global_step_{self.global_steps}')" in text
    )
    assert "actor_local_path = os.path.join(local_global_step_folder, 'actor')" in text
    assert "rmtree" not in text and "os.remove" not in text, "verl now clears the step folder"
    (actor,) = _calls(save, "self.actor_rollout_wg.save_checkpoint")
    tracker = _at(save, lambda n: isinstance(n, ast.Constant) and n.value == "latest_checkpointed_iteration.txt")
    written = _calls(save, "f.write")
    assert tracker and written and actor < tracker[0] < written[0]
    assert all(position > actor for position in written)


def test_retention_removes_only_the_saved_paths(source):
    manager = _method(source("utils/checkpoint/checkpoint_manager.py"), "BaseCheckpointManager", "register_checkpoint")
    text = ast.unparse(manager)
    assert "self.previous_saved_paths.append(new_path)" in text
    fsdp = ast.unparse(
        _method(source("utils/checkpoint/fsdp_checkpoint_manager.py"), "FSDPCheckpointManager", "save_checkpoint")
    )
    assert "self.register_checkpoint(local_path, max_ckpt_to_keep)" in fsdp, "the registered path is the actor/ one"
    remove = ast.unparse(
        _method(
            source("utils/checkpoint/checkpoint_manager.py"), "BaseCheckpointManager", "remove_previous_save_local_path"
        )
    )
    assert "shutil.rmtree(abs_path, ignore_errors=True)" in remove
    assert "dirname" not in remove, "verl now removes the step folder, arise/ included"


def test_the_step_loop_orders_save_metrics_log_and_clear(trainer):
    fit = trainer("fit")
    (step,) = _calls(fit, "self.step")
    (save,) = _calls(fit, "self._save_checkpoint")
    (compute,) = _calls(fit, "self._compute_metrics")
    logged = _at(
        fit,
        lambda n: isinstance(n, ast.Call) and ast.unparse(n) == "self.logger.log(data=metrics, step=self.global_steps)",
    )
    (clear,) = _calls(fit, "tq.kv_clear")
    advance = _at(fit, lambda n: isinstance(n, ast.AugAssign) and ast.unparse(n.target) == "self.global_steps")
    assert step < save < compute < clear and logged and compute < logged[0]
    assert any(a > logged[0] for a in advance), "global_steps advances after the step is logged"
    call = next(n for n in ast.walk(fit) if isinstance(n, ast.Call) and ast.unparse(n.func) == "self._compute_metrics")
    assert ast.unparse(call.args[1]) == "metrics", "the override must get the dict that is logged"
    rebound = _at(fit, lambda n: isinstance(n, ast.Name) and n.id == "metrics" and isinstance(n.ctx, ast.Store))
    assert all(position < step for position in rebound), "the metrics dict is rebound after the step"
    assert _at(fit, lambda n: isinstance(n, ast.Call) and ast.unparse(n) == "marked_timer('step', self.timing_raw)")


def test_the_base_metrics_hold_what_the_console_line_reads(trainer, source):
    text = ast.unparse(trainer("_compute_metrics"))
    assert "compute_data_metrics(" in text and "compute_timing_metrics(batch=batch, timing_raw=timing_raw)" in text
    assert "tag.get('is_padding', False) for tag in batch.tags" in text
    assert "keys=batch.keys, partition_id=batch.partition_id" in text
    metric_utils = source("trainer/ppo/metric_utils.py")
    assert json.dumps("critic/score/mean") in metric_utils
    assert 'f"timing_s/{name}": value for name, value in timing_raw.items()' in metric_utils
