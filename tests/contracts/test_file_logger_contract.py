"""What the run scripts' metrics paths rely on in verl's file logger (``trainer.logger`` "file",
verl/utils/tracking.py ``FileLogger``; run_scripts/common.sh and recipe/arise/tools/evaluate.py set
``VERL_FILE_LOGGER_PATH``):

- the path is ``VERL_FILE_LOGGER_PATH`` when set (no config key), else
  ``VERL_FILE_LOGGER_ROOT`` (default ".") / project / experiment ``.jsonl``;
- the file is opened with mode ``"wb"``: a new logger truncates it, so a resumed run that keeps
  the path loses the earlier steps' lines unless the scripts set them aside first; unbuffered, so a
  killed launch leaves every step it logged for the report (run_scripts/common.sh ``rotate_metrics``);
- one JSON line per ``log`` call: ``{"step": step, "data": {...}}``.

Run here on the stack's own ``FileLogger`` in a subprocess.
"""

import json

import pytest

PROBE = r"""
import json, os, sys
from verl.utils.tracking import FileLogger
path, root = sys.argv[1], sys.argv[2]
with open(path, "w") as f:
    f.write('{"step": 1, "data": {"old": 1.0}}\n')
os.environ["VERL_FILE_LOGGER_PATH"] = path
logger = FileLogger("proj", "exp")
logger.log({"arise/acc": 0.5}, step=7)
before_finish = open(path).read().splitlines()  # what a reader sees while the run goes on
mode = logger.fp.mode
logger.finish()
del os.environ["VERL_FILE_LOGGER_PATH"]
os.environ["VERL_FILE_LOGGER_ROOT"] = root
fallback = FileLogger("proj", "exp")
fallback.finish()
print(json.dumps({"lines": open(path).read().splitlines(), "fallback": fallback.filepath,
                  "before_finish": before_finish, "mode": mode}))
"""


@pytest.fixture(scope="module")
def logged(stack, tmp_path_factory):
    tmp = tmp_path_factory.mktemp(f"file_logger_{stack.name}")
    out = stack.run(PROBE, str(tmp / "metrics.jsonl"), str(tmp / "root"))
    return json.loads(out.strip().splitlines()[-1]), tmp


def test_the_path_comes_from_verl_file_logger_path_and_the_file_is_truncated(logged):
    state, _ = logged
    assert [json.loads(line) for line in state["lines"]] == [{"step": 7, "data": {"arise/acc": 0.5}}]


def test_without_the_variable_the_path_is_root_project_experiment(logged):
    state, tmp = logged
    assert state["fallback"] == str(tmp / "root" / "proj" / "exp.jsonl")


def test_the_opening_mode_is_write_binary(logged):
    state, _ = logged
    assert state["mode"] == "wb"  # truncating, never appending
    # unbuffered: each step's line is in the file as soon as it is logged (a killed launch keeps it)
    assert [json.loads(line) for line in state["before_finish"]] == [{"step": 7, "data": {"arise/acc": 0.5}}]
