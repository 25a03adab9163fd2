"""Project test configuration.

verl's wheel installs a top-level ``tests`` package; this suite has no ``__init__.py`` files and
runs with ``--import-mode=importlib`` (see pyproject.toml) so pytest collects these files.

Data: tests that read raw dataset files run on the few hand-written rows in ``tests/fixtures/raw``
(same layout and record formats as the local raw copies).  The same tests also run on the full
local copies in ``../shared/data/raw`` (or ``$ARISE_SHARED_DIR/data/raw``) where those exist: that
variant carries the ``shared_data`` marker and is deselected -- not skipped -- when the folder is
absent, with a line in the summary saying so.  So a fresh clone runs the fast tier with no skips but
ALFWorld's play (tests/envs/test_alfworld.py), which needs the ``alfworld`` package.

Tiers (docs/testing.md): README command 1 (``pytest -q tests``) runs every test; the fast tier
(``-m "not e2e"``) is the development loop; the ``launch`` tests, which start trainer or engine
launches of their own, are the ones ``-m "not launch"`` leaves out.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# One OpenMP thread in every test process and in what it starts, set before anything imports torch
# (libgomp reads it when it loads), as run_scripts/cpu_env.sh does for the launches: the tests'
# matrices are tiny, and OpenMP threads spin when processes share the cores (recipe/arise/cpu/tiny.py:
# 20 warm-start steps took 9 s on one thread, 179 s on two under load).
for _threads in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")
FIXTURES_RAW = REPO / "tests" / "fixtures" / "raw"
# shared test helpers (``from byte_tokenizer import ByteTokenizer``): test modules cannot import each
# other, and ``tests`` itself names verl's installed package
sys.path.insert(0, str(REPO / "tests" / "helpers"))


def shared_root() -> Path:
    """The folder holding ``data/raw`` (and the paper): $ARISE_SHARED_DIR, else ../shared."""
    env = os.environ.get("ARISE_SHARED_DIR")
    return Path(env).expanduser() if env else REPO.parent / "shared"


def _shared_raw_present() -> bool:
    return (shared_root() / "data" / "raw").is_dir()


def pytest_configure(config) -> None:
    config.addinivalue_line(
        "markers", "shared_data: runs on the full local raw data (../shared, $ARISE_SHARED_DIR); deselected without it"
    )


# the launch tier's modules (docs/testing.md), longest first (faults: two launches; the colocate_async
# run killed and resumed: two; the tool agent's; evaluation then plain GRPO; the single-turn
# separate_async run, whichever worker is free first takes it): under
# `-n 2 --dist loadfile` one on each worker, so two launches at a time, not three (three beside the
# fast tier took 24 GiB to 95%, where Ray's memory monitor killed workers of two of them)
LAUNCHING = (
    "test_faults_e2e.py",
    "test_cpu_async_resume_e2e.py",
    "test_cpu_async_e2e.py",
    "test_cpu_env_e2e.py",
    "test_cpu_separate_e2e.py",
    "test_cpu_e2e.py",
    "test_cpu_separate_single_turn_e2e.py",
)


def _launch_rank(item) -> int:
    name = item.path.name
    return LAUNCHING.index(name) if name in LAUNCHING else len(LAUNCHING)


def pytest_collection_modifyitems(config, items) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # under pytest-xdist (CI: -n 2 --dist loadfile --no-loadscope-reorder, each file one work
        # unit, handed out in collection order) the e2e files go first, the modules that launch
        # training runs (the launch tier) the longest first, so that each worker starts one (xdist
        # hands each worker its first two files at once: a launch queued behind another on the same
        # worker would run after it, not beside it)
        items.sort(key=lambda item: (item.get_closest_marker("e2e") is None, _launch_rank(item)))
    if not _shared_raw_present():  # deselected (not skipped); the summary line reports the count
        dropped = [item for item in items if item.get_closest_marker("shared_data")]
        if dropped:
            items[:] = [item for item in items if not item.get_closest_marker("shared_data")]
            config.hook.pytest_deselected(items=dropped)
            config._arise_shared_deselected = len(dropped)


# How much lower a pytest-xdist worker's priority is once it runs the fast tier: the e2e launches
# (the e2e files go first, one worker each) are the run's critical path, each a chain of Ray actors
# that start one after another, and on 2 cores a launch starved by the fast tier beside it took 12
# minutes to start; at a lower priority the fast tier takes the cycles the launches leave. Ray runs
# its workers (every actor of a launch, the vLLM engine under them) at nice 15 (its worker_niceness),
# so the fast tier goes lower still: at nice 10 it had three times an actor's share of a core.
FAST_TIER_NICENESS = 19


def pytest_runtest_setup(item) -> None:
    if not os.environ.get("PYTEST_XDIST_WORKER") or item.get_closest_marker("e2e") is not None:
        return
    if not getattr(item.config, "_arise_niced", False):
        item.config._arise_niced = True
        os.nice(FAST_TIER_NICENESS)  # raising one's own niceness needs no privilege


# under pytest-xdist the workers collect and deselect; each reports its counts to the controller,
# which writes the summary lines
_DESELECTED = ("_arise_shared_deselected",)


def pytest_sessionfinish(session) -> None:
    output = getattr(session.config, "workeroutput", None)  # set on a pytest-xdist worker only
    if output is not None:
        for name in _DESELECTED:
            output[name] = getattr(session.config, name, 0)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    output = getattr(node, "workeroutput", None) or {}
    for name in _DESELECTED:  # every worker collects the whole suite: the same counts
        setattr(node.config, name, max(getattr(node.config, name, 0), output.get(name, 0)))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    n = getattr(config, "_arise_shared_deselected", 0)
    if n:
        terminalreporter.write_line(
            f"{n} shared_data tests deselected: no raw data at {shared_root() / 'data' / 'raw'} "
            "(set ARISE_SHARED_DIR to run them on the full local copies)"
        )


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    root = shared_root()
    if not (root / "data" / "raw").is_dir():  # only reached by a shared_data test run by hand
        pytest.skip(f"shared data not found at {root} (set ARISE_SHARED_DIR)")
    return root


@pytest.fixture(scope="session", params=["fixtures", pytest.param("shared", marks=pytest.mark.shared_data)])
def raw_root(request) -> Path:
    """A raw-data folder: the committed fixture rows, then (shared_data) the full local copies."""
    if request.param == "fixtures":
        return FIXTURES_RAW
    return request.getfixturevalue("shared_dir") / "data" / "raw"


@pytest.fixture(scope="session")
def raw_kind(raw_root) -> str:
    """ "fixtures" or "shared": which raw folder ``raw_root`` is (for the expected counts)."""
    return "fixtures" if raw_root == FIXTURES_RAW else "shared"


@pytest.fixture
def tiny_chat_tokenizer():
    """A word-level tokenizer with a chat template, built in memory (no download): one token per
    word; ``<|user|>`` / ``<|assistant|>`` are 3 each ("<|", the role, "|>")."""
    import tokenizers
    import transformers
    from tokenizers import models, pre_tokenizers

    tok = tokenizers.Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "[PAD]": 1, "<eos>": 2}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", eos_token="<eos>"
    )
    fast.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    return fast


@pytest.fixture(scope="session")
def paper_script_overrides() -> tuple[str, list[str]]:
    """(entry, hydra overrides) of ``run_scripts/qwen3_4b_arise.sh`` as the preflight reads the script,
    under a minimal environment (the preflight tests compose their configs from it)."""
    from recipe.arise.tools import preflight

    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), "PYTHON": "python3"}
    return preflight.script_overrides(REPO / "run_scripts" / "qwen3_4b_arise.sh", env=env)


@pytest.fixture
def tool_trace():
    """A python-tool loop's response with one character per token id: ``ids``/``mask`` are the call
    turn, the tool turn as Qwen3's template renders it (special tokens skipped, roles as bare lines;
    mask 0, its 500-character result to be clipped) and the answer turn; ``segments(*(text, mask))``
    builds other responses the same way; ``code``, ``call`` and the turns' texts are its parts."""
    from types import SimpleNamespace

    code = "print(sum(range(101)))"
    call = '<tool_call>\n{"name": "python", "arguments": {"code": "' + code + '"}}\n</tool_call>'
    turn1 = "I will add them with Python.\n" + call
    result = "5050\n" + "r" * 500
    tool_turn = "\nuser\n<tool_response>\n" + result + "\n</tool_response>\nassistant\n"
    turn2 = "The sum is \\boxed{5050}."

    def segments(*parts):
        return [ord(c) for text, _ in parts for c in text], [m for text, m in parts for _ in text]

    ids, mask = segments((turn1, 1), (tool_turn, 0), (turn2, 1))
    return SimpleNamespace(
        code=code, call=call, result=result, turn1=turn1, tool_turn=tool_turn, turn2=turn2, segments=segments,
        ids=ids, mask=mask,
    )  # fmt: skip


@pytest.fixture(scope="session")
def gate_passes():
    """``gate_passes(scores, sigma, delta)``: whether the selection gate passes (seeded, no exploration)."""
    import numpy as np

    from recipe.arise.core.selection import select_skill_detailed

    def passes(scores, sigma, delta):
        rng = np.random.default_rng(0)
        return select_skill_detailed(scores, temperature=sigma, epsilon=0.0, gate=delta, rng=rng).gate_passed

    return passes


@pytest.fixture(scope="session")
def score_window():
    """``score_window(n, k, spread, seed)``: ``n`` seeded score vectors of ``k`` skills around -2.0."""
    import numpy as np

    def window(n=200, k=10, spread=0.3, seed=1):
        rng = np.random.default_rng(seed)
        return [rng.normal(-2.0, spread, size=k) for _ in range(n)]

    return window
