"""Every command line README.md and the docs pages in DOCS show is run
here, as written, in its cheapest faithful form; HOW maps each one to how, and a command the docs
show without an entry in HOW fails the test (as does an entry the docs no longer show).

- ``ci``: .ci/run runs it verbatim (tests/test_readme.py checks the README's two set-up commands).
- ``print``: a run script, run as written with PRINT_OVERRIDES=1: it prints its entry and final
  overrides and starts nothing (their composition and verl's checks: tests/test_run_scripts.py;
  the CPU evaluation end to end: tests/e2e/test_cpu_e2e.py::test_eval_on_validation_machinery).
- ``tool``: a command-line tool, run as written in a folder where ``outputs/cpu_smoke`` (and the
  README's ``checkpoints/arise_qwen3_4b/arise``) is a copy of README command 2's run, the one CI
  runs first and hands over as ARISE_SMOKE_OUT (without it, the command is run here first);
  ``outputs/cpu_smoke_grpo`` is that run's metrics without ARISE's keys, ``eval_grpo``/
  ``eval_arise`` two evaluation outputs. These read a trained run: they are marked ``e2e``, so the
  fast tier (``-m "not e2e"``) deselects them and command 1 always runs them.
- ``start``: a long job (calibrate: a vLLM engine, then scoring) started as written with the tiny
  model and data in place of the Hugging Face model and DeepScaleR, and stopped at its first
  progress line, the vLLM start (the whole CPU run was checked by hand: docs/tools.md).
- ``sandbox``: docs/sandbox.md's block, run in order.
- ``elsewhere``: needs the network or a GPU machine; the entry says what checks it instead.
- ``tier``: a pytest tier of docs/testing.md, or one folder's tests (docs/data.md), collected as written
  (``--collect-only``): it selects what the page says, skips nothing, and README command 1 (CI) runs
  every test of it.
- ``offline``: a data-prep command or a bench that needs neither the network nor a GPU, run as written
  in a folder whose ``../shared/data/raw`` is the raw data (the committed rows of tests/fixtures/raw,
  then the shared copies: ``shared_data``), with ``$HOME`` and ``$D`` empty folders of its own; it
  exits 0 and writes every file it promises (``_promised``), or, with ``ON_BAD=error`` on raw rows that
  hold malformed ones, exits 2 naming the row, as the page says (~1-30 s each, e2e: the fast tier deselects them).
- ``e2e``: a launch an end-to-end test (launch tier) runs as written (the entry names the test; it reads the
  command from its document).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import smoke_run
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
DOCS = (
    "README.md",
    "docs/tools.md",
    "docs/agent_loops.md",
    "docs/sandbox.md",
    "docs/testing.md",
    "docs/own_data.md",
    "docs/environments.md",
    "docs/data.md",
    "docs/gpu.md",
    "docs/performance.md",
)

E2E_EVAL = "e2e: tests/e2e/test_cpu_e2e.py::test_eval_on_validation_machinery"
E2E_ENV_PREP = "e2e: tests/data_prep/test_env_data_prep.py::test_the_documented_commands_as_written"
E2E_ALFWORLD = "e2e: tests/data_prep/test_alfworld_data_prep.py::test_the_documented_commands_as_written"
_HUB = "elsewhere: reads the HF hub; its --local line runs here (offline), the mocked hub in tests/data_prep"
_LAUNCHES = "elsewhere: trainer launches for 30-80 min; its statistics: tests/tools/test_bench_stats.py"
HOW = {
    # README: set-up
    "bash scripts/install_cpu.sh .venv && .venv/bin/python -m pytest -q tests": "ci",
    "PYTHON=.venv/bin/python bash run_scripts/cpu_smoke_arise.sh": "ci",
    # docs/testing.md: the tiers
    '.venv/bin/python -m pytest -q -m "not e2e" tests': "tier",
    ".venv/bin/python -m pytest -q -m launch tests": "tier",
    '.venv/bin/python -m pytest -q -m "not launch" tests': "tier",
    "bash .ci/run": "elsewhere: CI itself, on a fresh clone at every stop",
    # README: on GPUs
    "bash scripts/install_gpu.sh .venv && . .venv/bin/activate": "elsewhere: .ci/run resolves it "
    "(install_gpu.sh --dry-run) and tests/tools/test_gpu_stack.py reads the resolution",
    "bash data_prep/prepare_all.sh": "elsewhere: downloads from the HF hub; its --local lines run here (offline) "
    "and the mocked hub path in tests/data_prep/test_data_prep.py",
    "bash run_scripts/qwen3_4b_arise.sh": "print",
    "bash run_scripts/qwen3_4b_arise.sh arise.selection.gate=0.25 trainer.logger='[console,wandb]'": "print",
    "ABLATION=no_gate bash run_scripts/qwen3_4b_arise.sh": "print",
    "METHOD=dapo MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 bash run_scripts/baseline.sh": "print",
    "python -m recipe.arise.tools.preflight run_scripts/qwen3_4b_arise.sh": "tool",
    "MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 bash run_scripts/gpu_check.sh": "print",
    "bash run_scripts/qwen3_4b_arise_tool.sh": "print",
    # README: tool-using agents
    "bash data_prep/prepare_all.sh --tool python": "elsewhere: downloads from the HF hub; the --tool flag runs "
    "on tests/fixtures/raw in tests/data_prep/test_tool_data.py",
    "TOOL=python METHOD=grpo MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 bash run_scripts/baseline.sh": "print",
    "TOOL=python MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 CKPT=checkpoints/arise_qwen3_4b/arise_tool/global_step_2000 "
    "bash run_scripts/eval_arise.sh": "print",
    "TOOL=python PYTHON=.venv/bin/python bash run_scripts/cpu_smoke_arise.sh": "ci",
    ".venv/bin/python bench/bench_learning_effect.py --tool --steps 12": "elsewhere: six trainer launches "
    "(~30 min); --quick is its smoke check, and the world's warm start is tested in tests/adapters/test_tool_world.py",
    # README: evaluation, inspection, reports
    "MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 CKPT=checkpoints/arise_qwen3_4b/arise/global_step_2000 "
    "bash run_scripts/eval_arise.sh": "print",
    "python -m recipe.arise.tools.evaluate --combine eval_grpo eval_arise --out tables": "tool",
    "python -m recipe.arise.tools.inspect_run checkpoints/arise_qwen3_4b/arise --sort utility --top 10": "tool",
    "python -m recipe.arise.tools.report outputs/cpu_smoke": "tool",
    "python -m recipe.arise.tools.calibrate --model Qwen/Qwen3-4B-Instruct-2507 "
    "--data ~/data/arise/train/deepscaler.parquet --queries 64": "start",
    # docs/tools.md
    "python -m recipe.arise.tools.inspect_run outputs/cpu_smoke/checkpoints": "tool",
    "python -m recipe.arise.tools.inspect_run outputs/cpu_smoke/checkpoints/global_step_2": "tool",
    "python -m recipe.arise.tools.inspect_run outputs/cpu_smoke/checkpoints/global_step_6/arise/library.parquet "
    "--sort utility --top 10": "tool",
    "python -m recipe.arise.tools.inspect_run outputs/cpu_smoke --tier reservoir --type algebra --name count --full": (
        "tool"
    ),
    "python -m recipe.arise.tools.inspect_run outputs/cpu_smoke --json | jq '.rows[] | {id, utility, ig}'": "tool",
    "python -m recipe.arise.tools.report outputs/cpu_smoke --out /tmp/rep --phase1-steps 2": "tool",
    "python -m recipe.arise.tools.report outputs/cpu_smoke --metrics outputs/cpu_smoke/metrics.jsonl "
    "--log-dir outputs/cpu_smoke/checkpoints/arise": "tool",
    "python -m recipe.arise.tools.verdict outputs/cpu_smoke": "tool",
    "python -m recipe.arise.tools.verdict --expect grpo outputs/cpu_smoke_grpo": "tool",
    "python -m recipe.arise.tools.verdict --scale gpu --launch-only outputs/cpu_smoke/metrics.jsonl": "tool",
    # docs/own_data.md
    "OUT_DIR=outputs/cpu_own TRAIN_FILES=my_data/train.parquet VAL_FILES=my_data/val.parquet "
    "PYTHON=.venv/bin/python bash run_scripts/cpu_smoke_arise.sh": "print",
    "T=$(.venv/bin/python -m recipe.arise.cpu.tiny --cached | tail -n 1)": E2E_EVAL,
    "CPU=1 PYTHON=.venv/bin/python MODEL_PATH=$T/model CKPT=outputs/cpu_smoke/checkpoints/global_step_6 "
    "DATA_FILES=$T/data/val.parquet K=2 OUT=outputs/cpu_eval bash run_scripts/eval_arise.sh": E2E_EVAL,
    "EXPERIMENT=arise_my_data TRAIN_FILES=$PWD/my_data/train.parquet VAL_FILES=$PWD/my_data/val.parquet "
    "bash run_scripts/qwen3_4b_arise.sh": "print",
    "MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 CKPT=checkpoints/arise_qwen3_4b/arise_my_data/global_step_2000 "
    "DATA_FILES=$PWD/my_data/val.parquet bash run_scripts/eval_arise.sh": "print",
    # docs/environments.md: an environment's data prep (a JVM, ~100 games: e2e)
    "python -m recipe.arise.data_prep.env --env twx --out ~/data/arise/env/twx": E2E_ENV_PREP,
    "python -m recipe.arise.data_prep.env --env scienceworld --out ~/data/arise/env/scienceworld --train 10 --test 5": (
        E2E_ENV_PREP
    ),
    # docs/environments.md: ALFWorld (the package and its data from github.com; data prep and the preflight
    # run as written on a data folder in ALFWorld's format)
    "pip install alfworld==0.4.2 && alfworld-download": "elsewhere: alfworld-download needs github.com; "
    "tests/envs/test_alfworld.py plays games written in ALFWorld's format where alfworld imports",
    "python -m recipe.arise.data_prep.env --env alfworld --out ~/data/arise/env/alfworld": E2E_ALFWORLD,
    "python -m recipe.arise.tools.preflight_env alfworld": E2E_ALFWORLD,
    "ENV=alfworld bash run_scripts/qwen3_4b_arise_env.sh": "print",
    "ENV=alfworld METHOD=grpo MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 bash run_scripts/baseline.sh": "print",
    "ENV=alfworld MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 "
    "CKPT=checkpoints/arise_qwen3_4b/arise_env_alfworld/global_step_200 OUT=eval_out/alf_arise "
    "bash run_scripts/eval_arise.sh": "print",
    # docs/environments.md: the CPU smoke run in TextWorldExpress (a launch: the launch tier)
    "ENV=twx PYTHON=.venv/bin/python bash run_scripts/cpu_smoke_arise.sh": (
        "e2e: tests/e2e/test_cpu_env_e2e.py::test_episodes_are_played_and_finish"
    ),
    # docs/environments.md: the GPU runs in an environment and their evaluation
    "ENV=twx bash run_scripts/qwen3_4b_arise_env.sh": "print",
    "ENV=twx METHOD=grpo MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 bash run_scripts/baseline.sh": "print",
    "ENV=scienceworld MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 "
    "CKPT=checkpoints/arise_qwen3_4b/arise_env_scienceworld/global_step_200 OUT=eval_out/sw_arise "
    "bash run_scripts/eval_arise.sh": "print",
    # docs/sandbox.md
    "actor_rollout_ref.rollout.multi_turn.tool_config_path=recipe/arise/config/python_tool.yaml": "elsewhere: "
    "an override, not a command; every TOOL=python script sets it (tests/test_run_scripts.py)",
    "printf 'import sympy as sp\\nprint(sp.integrate(sp.sin(sp.Symbol(\"x\"))**2))\\n' > /tmp/integral.py": "sandbox",
    ".venv/bin/python -m recipe.arise.core.sandbox /tmp/integral.py --describe": "sandbox",
    "printf 'while True:\\n    pass\\n' > /tmp/loop.py": "sandbox",
    ".venv/bin/python -m recipe.arise.core.sandbox /tmp/loop.py --wall-s 2 --isolation none": "sandbox",
    '.venv/bin/python -c "from recipe.arise.core.sandbox import describe_isolation; print(describe_isolation())"': (
        "sandbox"
    ),
    # docs/data.md: every dataset at once, then one at a time (the hub's reads: elsewhere)
    "bash data_prep/prepare_all.sh --local ../shared/data/raw": "offline",
    "DATA_DIR=~/data/arise_strict PYTHON=.venv/bin/python ON_BAD=error bash data_prep/prepare_all.sh "
    "--local ../shared/data/raw": "offline",
    "python -m recipe.arise.data_prep.deepscaler --out $D/train": _HUB,
    "python -m recipe.arise.data_prep.deepscaler --local /path/deepscaler.json --out $D/train": "elsewhere: "
    "the hub's full json is in no raw folder here; a json file through --local: tests/data_prep/test_data_prep.py",
    "python -m recipe.arise.data_prep.deepscaler --local ../shared/data/raw/deepscaler/train_components "
    "--out $D/train": "offline",
    "python -m recipe.arise.data_prep.deepscaler --components ../shared/data/raw/deepscaler/train_components "
    "--out $D/train": "offline",
    "python -m recipe.arise.data_prep.aime24  --out $D/eval": _HUB,
    "python -m recipe.arise.data_prep.aime24  --local ../shared/data/raw/aime24_qwen25math/test.jsonl "
    "--out $D/eval": "offline",
    "python -m recipe.arise.data_prep.aime25  --out $D/eval": _HUB,
    "python -m recipe.arise.data_prep.aime25  --local ../shared/data/raw/aime25/test.jsonl --out $D/eval": "offline",
    "python -m recipe.arise.data_prep.amc23   --out $D/eval": _HUB,
    "python -m recipe.arise.data_prep.amc23   --local ../shared/data/raw/amc23_qwen25math/test.jsonl "
    "--out $D/eval": "offline",
    "python -m recipe.arise.data_prep.omni_math --out $D/eval": _HUB,
    "python -m recipe.arise.data_prep.omni_math --local ../shared/data/raw/omni_math_rule/omni_math_rule.jsonl "
    "--out $D/eval": "offline",
    "python -m recipe.arise.data_prep.math500 --out $D/eval": _HUB,
    "python -m recipe.arise.data_prep.math500 --local ../shared/data/raw/math500/test.jsonl --out $D/eval": "offline",
    "bash data_prep/prepare_all.sh --tool python --local ../shared/data/raw": "offline",
    ".venv/bin/python -m pytest -q tests/data_prep": "tier",
    # docs/gpu.md: the preflight (as README's), flash-attn
    "python -m recipe.arise.tools.preflight run_scripts/qwen3_4b_arise.sh arise.selection.gate=0.25": "tool",
    "MODEL_PATH=Qwen/Qwen3-4B-Instruct-2507 python -m recipe.arise.tools.preflight --gpu-mem-gib 80 "
    "run_scripts/baseline.sh": "tool",
    'pip install ninja packaging && MAX_JOBS=8 pip install "flash-attn==2.8.3" --no-build-isolation': "elsewhere: "
    "a CUDA build (nvcc, the network); without it the actor's attention is sdpa "
    "(tests/contracts/test_actor_attention.py)",
    'python -c "import flash_attn, torch; print(flash_attn.__version__, torch.__version__)"': "elsewhere: "
    "needs the flash-attn build above; ATTN=auto's choice is tested in tests/test_run_scripts.py",
    # docs/performance.md: the benches (the launches and minutes-long ones: elsewhere)
    "bash scripts/install_cpu.sh .venv": "ci",
    ".venv/bin/python bench/bench_step_overhead.py --paper-proportions": _LAUNCHES,
    ".venv/bin/python bench/bench_step_overhead.py --paper-proportions --prompt-tokens 99 --positions 1024 "
    "--batch 4 --full-prefill-arm": _LAUNCHES,
    ".venv/bin/python bench/bench_step_overhead.py --paper-proportions --prompt-tokens 99 --positions 1024 "
    "--batch 4 --score-top-m 3 -- arise.selection.scoring_prefix_cache=false": _LAUNCHES,
    ".venv/bin/python bench/bench_step_overhead.py --paper-proportions --prompt-tokens 99 --positions 1024 "
    "--batch 4 --stream-arm": _LAUNCHES,
    ".venv/bin/python bench/bench_step_overhead.py --steps 4 --reps 1": _LAUNCHES,
    ".venv/bin/python bench/bench_trainer_modes.py": "elsewhere: trainer launches for hours; its ratios without "
    "a launch: tests/tools/test_bench_trainer_modes.py",
    ".venv/bin/python bench/bench_grader.py --n 512 --shared ../shared": "offline",
    ".venv/bin/python bench/bench_library.py": "offline",
    ".venv/bin/python bench/bench_library_dynamics.py --reps 8": "elsewhere: ~4 min of both cores; "
    "tests/core/test_library_dynamics.py runs it at a small scale",
}
# a tool's exit statuses that mean "it ran and answered", where 1 is one of them, each checked for its
# reason (test_tools_as_written_on_the_cpu_run): the verdict of a 6-step tiny run held to the paper's
# numbers is OK, WARN or FAIL by the run (its lines must say which); the preflight of a GPU script
# without ~/data/arise reports that data as missing (1)
EXIT = {"verdict --scale gpu": (0, 1), "preflight run_scripts/": (0, 1), "preflight --gpu-mem-gib": (0, 1)}


def documented() -> dict[str, list[str]]:
    """Each command line of the docs' ```bash blocks (continuations joined, comments dropped)."""
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        text = (REPO / doc).read_text()
        for block in re.findall(r"^```(?:bash|sh)\n(.*?)^```", text, re.S | re.M):
            pending = ""
            for raw in block.splitlines():
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                line = re.sub(r"\s+#\s.*$", "", line)
                if line.endswith("\\"):
                    pending += line[:-1].rstrip() + " "
                    continue
                found.setdefault(pending + line, []).append(doc)
                pending = ""
    return found


def _of(kind: str) -> list[str]:
    return [c for c, how in HOW.items() if how.split(":")[0] == kind]


def _env(**extra) -> dict[str, str]:
    """The caller's PATH with this interpreter's folder first: `python` is the project's."""
    keep = {k: v for k, v in os.environ.items() if k in ("HOME", "LANG", "TMPDIR", "USER", "ARISE_CACHE")}
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**keep, "PATH": path, "PYTHONPATH": str(REPO), **extra}


def test_every_documented_command_says_how_it_is_exercised():
    shown = documented()
    unmapped = [f"{docs[0]}: {c}" for c, docs in shown.items() if c not in HOW]
    assert not unmapped, "add these documented commands to HOW (how each is run here):\n" + "\n".join(unmapped)
    stale = [c for c in HOW if c not in shown]
    assert not stale, "HOW names commands no document shows any more:\n" + "\n".join(stale)
    kinds = {how.split(":")[0] for how in HOW.values()}
    assert kinds <= {"ci", "print", "tool", "start", "sandbox", "elsewhere", "tier", "e2e", "offline"}, kinds


def test_every_page_with_shell_blocks_is_read():
    """A page of docs/ that shows commands is in DOCS: its commands then need an entry in HOW."""
    pages = ["README.md", *(f"docs/{p.name}" for p in sorted((REPO / "docs").glob("*.md")))]
    shown = [p for p in pages if re.search(r"^```(?:bash|sh)\n", (REPO / p).read_text(), re.M)]
    assert set(shown) <= set(DOCS), sorted(set(shown) - set(DOCS))


def test_what_the_e2e_tier_runs_names_a_test_that_reads_its_document():
    for command in _of("e2e"):
        path, name = HOW[command].split(": ", 1)[1].split("::")
        source = (REPO / path).read_text()
        assert f"def {name}(" in source, HOW[command]
        docs = documented()[command]
        assert any(doc in source for doc in docs), (command, docs)  # the test reads the command where it is shown


def test_ci_runs_its_commands_verbatim():
    ci = [re.sub(r"\s+#\s.*$", "", line.strip()) for line in (REPO / ".ci" / "run").read_text().splitlines()]
    for command in _of("ci"):
        assert command in ci, command
    assert any("install_gpu.sh --dry-run" in line for line in ci)  # the GPU install's resolution


def test_ci_runs_every_tier():
    """.ci/run runs README command 1 with no marker expression of its own: every test, the launch tier
    too (tests/conftest.py deselects nothing but shared_data without the data)."""
    ci = (REPO / ".ci" / "run").read_text()
    runs = [line.split(" pytest", 1)[1].split() for line in ci.splitlines() if " -m pytest" in line]
    assert runs == [["-q", "tests"]], runs  # README command 1, and no other pytest run
    addopts = ci.split('PYTEST_ADDOPTS="', 1)[1].split('"', 1)[0].split()
    assert "-m" not in addopts and "-k" not in addopts and "--deselect" not in addopts, addopts


# the tiers' collections in one interpreter: each command's arguments to pytest.main as `python -m
# pytest` passes them; the second and third collections reuse the first's imports (~16 CPU-s each
# as a process of its own, ~1 after the first)
COLLECT = r"""
import contextlib, io, json, sys
import pytest
collected = []
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        returncode = int(pytest.main(args))
    collected.append({"returncode": returncode, "stdout": out.getvalue()})
print(json.dumps(collected))
"""


@pytest.fixture(scope="module")
def tier_collections() -> dict[str, dict]:
    """command -> (returncode, stdout) of its --collect-only, as written (COLLECT)."""
    args = {}
    for command in _of("tier"):
        argv = shlex.split(command)
        assert argv[:3] == [".venv/bin/python", "-m", "pytest"], argv
        args[command] = [*argv[3:], "--collect-only", "-p", "no:xdist"]
    proc = subprocess.run(
        [sys.executable, "-c", COLLECT, json.dumps(list(args.values()))],
        cwd=REPO,
        env={**os.environ, "PYTEST_ADDOPTS": ""},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    collected = json.loads(proc.stdout.strip().splitlines()[-1])
    return dict(zip(args, collected, strict=True))


@pytest.mark.parametrize("command", _of("tier"))
def test_the_tiers_as_written_select_what_docs_say(command, tier_collections):
    """Each tier collects as written, without errors, and holds what docs/testing.md says it holds."""
    proc = tier_collections[command]
    assert proc["returncode"] == 0, proc["stdout"][-3000:]
    ids = [line for line in proc["stdout"].splitlines() if "::" in line]
    launches = [i for i in ids if _is_launch(i)]
    if "not e2e" in command:  # the development loop: no end-to-end module at all
        assert len(ids) > 1000 and not [i for i in ids if i.startswith("tests/e2e/")], len(ids)
    elif "not launch" in command:
        assert len(ids) > 1000 and not launches and [i for i in ids if i.startswith("tests/e2e/")], len(ids)
    elif "launch" in command:
        assert len(ids) >= 12 and launches == ids, ids
        assert {m for m in _LAUNCH_MODULES if any(f"/{m}::" in i for i in ids)} == set(_LAUNCH_MODULES), ids
    else:  # one folder's tests: that folder's, all of them (no marker expression)
        folder = shlex.split(command)[-1]
        assert folder.startswith("tests/") and "-m" not in shlex.split(command)[3:], command
        assert len(ids) >= 20 and all(i.startswith(f"{folder}/") for i in ids), ids


# the launch tier (tests/test_tiers.py checks the marker is on exactly the tests that launch): whole
# modules and two tests of the README run's module
_LAUNCH_MODULES = (
    "test_faults_e2e.py",
    "test_scoring_prefix_cache.py",
    "test_cpu_async_e2e.py",
    "test_cpu_async_resume_e2e.py",
    "test_cpu_separate_e2e.py",
    "test_cpu_separate_single_turn_e2e.py",
    "test_cpu_env_e2e.py",
)
_LAUNCH_TESTS = (
    "test_cpu_e2e.py::test_eval_on_validation_machinery",
    "test_cpu_e2e.py::test_plain_grpo_through_the_same_path",
)


def _is_launch(test_id: str) -> bool:
    return any(f"/{m}::" in test_id for m in _LAUNCH_MODULES) or test_id.endswith(_LAUNCH_TESTS)


@pytest.mark.parametrize("command", _of("elsewhere"))
def test_what_runs_elsewhere_is_at_least_well_formed(command):
    scripts = [REPO / w for w in command.split() if w.endswith(".sh")]
    for script in scripts:
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    if "=" in command.split()[0] and not scripts:  # an override: the file it names exists
        assert (REPO / command.split("=", 1)[1]).is_file()


@pytest.mark.parametrize("command", _of("print"))
def test_run_scripts_as_written_print_their_run(command):
    proc = subprocess.run(
        ["bash", "-c", command],
        cwd=REPO,
        env=_env(PRINT_OVERRIDES="1", PYTHON=sys.executable),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == "ENTRY=recipe.arise.adapters.main_arise", proc.stdout[:500]
    extra = [w for w in shlex.split(command.split(".sh", 1)[1])]  # the command line's hydra overrides
    assert lines[len(lines) - len(extra) :] == extra  # come last, as given


def test_the_tools_name_their_command_in_help(capsys):
    """`--help` says `python -m recipe.arise.tools.X`, the documented way to run them (not X.py)."""
    import importlib

    modules = sorted({m for c in HOW for m in re.findall(r"python -m (recipe\.arise\.tools\.\w+)", c)})
    assert len(modules) >= 6, modules
    for module in modules:
        with pytest.raises(SystemExit) as exit_:
            rc = importlib.import_module(module).main(["--help"])
            raise SystemExit(rc)
        text = capsys.readouterr().out
        assert exit_.value.code in (0, None) and f"python -m {module}" in text, module
        assert f"{module.rsplit('.', 1)[1]}.py" not in text.split("\n\n")[0], module


def test_the_sandbox_walkthrough_as_written():
    for command in _of("sandbox"):
        proc = subprocess.run(["bash", "-c", command], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, (command, proc.stdout[-2000:], proc.stderr[-2000:])
        if "integral.py --describe" in command:
            assert "x/2 - sin(x)*cos(x)/2" in proc.stdout
        if "loop.py --wall-s" in command:
            assert "time" in proc.stdout.lower()  # the tool's time-limit error, shown to the model


def _incomplete(run: Path) -> str | None:
    """Why ``run`` is not a complete README-command-2 run (its six steps, the step-6 library)."""
    why, _ = smoke_run.incomplete(run, 6)
    if why is None and not (run / "checkpoints" / "global_step_6" / "arise" / "library.parquet").is_file():
        why = "no library in the step-6 checkpoint"
    return why


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """A folder where the documented paths exist: README command 2's run (a copy: report writes into it)."""
    here = tmp_path_factory.mktemp("cpu_smoke")  # README command 2 run here, without CI's
    smoke = smoke_run.reuse_or_run("ARISE_SMOKE_OUT", _incomplete, smoke_run.launch, here)
    root = tmp_path_factory.mktemp("documented")
    run = root / "outputs" / "cpu_smoke"
    shutil.copytree(smoke, run, ignore=shutil.ignore_patterns("actor", "data.pt", "hf_model", "report", "*.log"))
    (root / "run_scripts").symlink_to(REPO / "run_scripts")  # the preflight's script, as from the repository
    (root / "checkpoints" / "arise_qwen3_4b").mkdir(parents=True)
    (root / "checkpoints" / "arise_qwen3_4b" / "arise").symlink_to(run)
    grpo = root / "outputs" / "cpu_smoke_grpo"  # the same steps with ARISE's keys gone: plain GRPO's metrics
    grpo.mkdir()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    strip = [{**r, "data": {k: v for k, v in r["data"].items() if not k.startswith("arise/")}} for r in rows]
    (grpo / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in strip))
    config = OmegaConf.load(run / "hydra" / ".hydra" / "config.yaml")  # the run's config, ARISE off
    config.arise.enable = False
    (grpo / "hydra" / ".hydra").mkdir(parents=True)
    OmegaConf.save(config, grpo / "hydra" / ".hydra" / "config.yaml")
    from recipe.arise.tools.evaluate import write_outputs

    for label, acc in (("grpo", 0.25), ("arise", 0.5)):
        write_outputs({"aime24": {"pass@1": acc, "k": 32}}, root / f"eval_{label}", label)
    return root


@pytest.mark.e2e
@pytest.mark.parametrize("command", _of("tool"))
def test_tools_as_written_on_the_cpu_run(command, workspace):
    proc = subprocess.run(
        ["bash", "-o", "pipefail", "-c", command],
        cwd=workspace,
        env=_env(PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    allowed = next((codes for key, codes in EXIT.items() if key in command), (0,))
    assert proc.returncode in allowed, (proc.returncode, proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.stdout.strip(), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    if "verdict" in command:  # its exit status is the one its lines give: 1 exactly when a check FAILs
        statuses = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("[verdict] ")]
        assert statuses and (proc.returncode == 1) == ("FAIL" in statuses), (proc.returncode, proc.stdout)
        if "--scale gpu" in command:
            assert ", scale gpu" in proc.stdout.splitlines()[0], proc.stdout
    if "preflight" in command and proc.returncode:
        errors = [line for line in proc.stdout.splitlines() if line.startswith("[preflight] ERROR")]
        assert errors and all("data file(s) not found" in e and "/data/arise/" in e for e in errors), errors
    if "--combine" in command:
        assert (workspace / "tables" / "table.md").is_file() and "[eval] wrote tables/table.md" in proc.stdout


@pytest.mark.e2e
def test_calibrate_as_written_starts_on_this_machine(workspace):
    """The README's calibrate with the run's tiny model and data in place of the HF model and
    DeepScaleR: the queries load, the CPU layer is applied where there is no GPU, and it reaches the
    vLLM start within a bounded time; it is stopped there (the engine and scoring: ~1 min of CPU)."""
    from omegaconf import OmegaConf

    (command,) = _of("start")
    cfg = OmegaConf.load(workspace / "outputs" / "cpu_smoke" / "hydra" / ".hydra" / "config.yaml")
    tiny = shlex.split(command)
    tiny[tiny.index("--model") + 1] = str(cfg.actor_rollout_ref.model.path)
    tiny[tiny.index("--data") + 1] = str(cfg.data.train_files)
    proc = subprocess.Popen(tiny, cwd=workspace, env=_env(), stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    seen, deadline = [], time.time() + 120
    try:
        for line in proc.stderr:
            seen.append(line.rstrip())
            if "[calibrate] starting the vLLM engine" in line or time.time() > deadline:
                break
    finally:
        proc.kill()
        proc.wait()
    assert seen and "[calibrate] starting the vLLM engine" in seen[-1], "\n".join(seen[-30:])
    assert seen[0].startswith("[calibrate] ") and "queries of" in seen[0]
    import torch

    if not torch.cuda.is_available():
        assert any("no GPU: the CPU layer" in line for line in seen), seen


def test_the_own_data_rows_block_writes_files_a_run_accepts(tmp_path, monkeypatch):
    """docs/own_data.md's Python block, as written: its files pass the checks a run makes on rows
    (preflight and dataset: recipe.arise.data_prep.schema.file_row_faults) and have the converters' schema."""
    import pyarrow.parquet as pq

    from recipe.arise.data_prep.schema import SCHEMA, file_row_faults

    (block,) = re.findall(r"^```python\n(.*?)^```", (REPO / "docs" / "own_data.md").read_text(), re.S | re.M)
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "docs/own_data.md", "exec"), {})
    for name, rows in (("train", 4), ("val", 2)):
        path = tmp_path / "my_data" / f"{name}.parquet"
        assert file_row_faults(path) == (rows, [])
        assert pq.read_schema(path).remove_metadata() == SCHEMA.remove_metadata()


_EVAL = ("aime24", "aime25", "amc23", "math500", "omni_math")
_DOMAINS = tuple(f"omni_math_{d}" for d in ("algebra", "number_theory", "combinatorics", "geometry"))
_EVERY = ("train/deepscaler", *(f"eval/{name}" for name in (*_EVAL, *_DOMAINS)))


def _promised(command: str) -> list[str]:
    """The parquet files an ``offline`` command promises (docs/data.md), relative to its folder's parent."""
    if "prepare_all.sh" in command:  # DATA_DIR, else ~/data/arise (~/data/arise_tool with --tool)
        data_dir = re.search(r"DATA_DIR=~/(\S+)", command)
        folder = f"home/{data_dir[1]}" if data_dir else "home/data/arise" + ("_tool" if "--tool" in command else "")
        return [f"{folder}/{stem}.parquet" for stem in _EVERY]
    if "data_prep." in command:  # one converter: its file in --out $D/<split>, Omni-MATH's domains beside it
        name = re.search(r"data_prep\.(\w+)", command)[1]
        out = command.split("--out $D/", 1)[1].split()[0]
        return [f"D/{out}/{stem}.parquet" for stem in (name, *(_DOMAINS if name == "omni_math" else ()))]
    return []  # a bench: its report is its output


def _run_offline(command: str, raw: Path | None, tmp_path: Path, refuses: bool = False) -> None:
    """``command`` as written in ``tmp_path/repo``: ``../shared/data/raw`` is ``raw``, the repository's
    folders and interpreter are there as from a clone, ``$HOME``, ``$D`` and ``$TMPDIR`` are empty folders."""
    repo = tmp_path / "repo"
    repo.mkdir()
    for name in ("data_prep", "bench"):
        (repo / name).symlink_to(REPO / name)
    (repo / ".venv").symlink_to(Path(sys.executable).parent.parent)  # `.venv/bin/python`: this interpreter
    if raw is not None:
        (tmp_path / "shared" / "data").mkdir(parents=True)
        (tmp_path / "shared" / "data" / "raw").symlink_to(raw)
    for name in ("home", "D", "tmp"):
        (tmp_path / name).mkdir()
    env = _env(HOME=str(tmp_path / "home"), D=str(tmp_path / "D"), TMPDIR=str(tmp_path / "tmp"))
    proc = subprocess.run(["bash", "-c", command], cwd=repo, env=env, capture_output=True, text=True, timeout=300)
    if refuses:  # the page's exit status 2 with `error: ...`, the bad row named
        assert proc.returncode == 2 and "error: " in proc.stderr and " row " in proc.stderr, proc.stderr[-3000:]
        return
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert proc.stdout.strip() and "Traceback" not in proc.stderr, (proc.stdout[-2000:], proc.stderr[-3000:])
    import pyarrow.parquet as pq

    for name in _promised(command):
        path = tmp_path / name
        assert path.is_file() and pq.ParquetFile(path).metadata.num_rows > 0, (name, proc.stdout[-2000:])


@pytest.mark.e2e
@pytest.mark.parametrize("command", [c for c in _of("offline") if "../shared" in c])
def test_offline_commands_as_written_on_the_raw_data(command, raw_root, tmp_path):
    """docs/data.md's --local lines and the grader bench: the fixture rows, then the shared copies
    (both hold malformed rows: ON_BAD=error refuses them, as the page says)."""
    _run_offline(command, raw_root, tmp_path, refuses="ON_BAD=error" in command)


@pytest.mark.e2e
@pytest.mark.parametrize("command", [c for c in _of("offline") if "../shared" not in c])
def test_offline_commands_as_written(command, tmp_path):
    _run_offline(command, None, tmp_path)
