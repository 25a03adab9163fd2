"""docs/environments.md's bring-your-own example, as written: its module registers an environment,
its data block writes rows a run accepts, an episode of its games can be won, and verl's
VERL_USE_EXTERNAL_MODULES registers it in any process that imports verl (the agent-loop workers)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from recipe.arise.data_prep.schema import file_row_faults
from recipe.arise.envs import base

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def example(tmp_path, monkeypatch):
    module, data = re.findall(r"^```python\n(.*?)^```", (REPO / "docs" / "environments.md").read_text(), re.S | re.M)
    assert module.startswith("# my_envs.py\n")
    (tmp_path / "my_envs.py").write_text(module)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(base, "ENVS", dict(base.ENVS))  # the registration stays in this test
    monkeypatch.delitem(sys.modules, "my_envs", raising=False)
    yield tmp_path, data
    sys.modules.pop("my_envs", None)


def test_the_documented_environment_and_its_data(example):
    folder, data = example
    exec(compile(data, "docs/environments.md", "exec"), {})
    rows = {}
    for split, n in (("train", 8), ("test", 3)):
        path = folder / "my_env_data" / f"{split}.parquet"
        assert file_row_faults(path) == (n, [])
        rows[split] = pq.read_table(path).to_pylist()
    games = {s: {r["extra_info"]["env"] for r in found} for s, found in rows.items()}
    assert not games["train"] & games["test"]
    row = rows["test"][0]
    assert row["data_source"] == "env/corridor/long" and row["agent_name"] == "arise_env_agent"
    spec = json.loads(row["extra_info"]["env"])
    env = base.make_env(spec["name"], **spec["options"])
    task, step = env.reset(spec["game"])
    assert task == "Walk east to room 9." and not step.done
    while not step.done:
        step = env.step("east")
    assert step.won


@pytest.mark.e2e  # a fresh interpreter importing verl: 10-45 s on the busy 2 cores
def test_verl_s_external_modules_register_it_in_a_fresh_process(example):
    folder, _ = example
    code = "import verl; from recipe.arise.envs.base import ENVS; print(sorted(ENVS))"
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "my_envs", "PYTHONPATH": f"{folder}{os.pathsep}{REPO}"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'corridor'" in out.stdout.splitlines()[-1]
