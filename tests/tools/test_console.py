"""The concise console (recipe.arise.tools.console, every launch's through recipe.arise.tools.launch)
shows what starts and the steps of a run's output, and hides the rest."""

import io
import re

from recipe.arise.tools.console import ConsoleFilter

# lines of a real CPU run's log (shortened), the noise around them included
LOG = [
    "INFO:2026-11-25 20:40:37,627:Platform override from VERL_PLATFORM: cpu",
    "(TaskRunnerV1 pid=1987)                                  'clip_ratio': 0.2,",
    "2026-11-25 20:40:48,950\tINFO worker.py:2038 -- Started a local Ray instance.",
    "(TaskRunnerV1 pid=1987) INFO:2026-11-25 20:41:20,848:train and validate dataloader initialized, "
    "train dataset size: 165, val dataset size: 12",
    "(WorkerDict pid=2498) Loading weights:   0%|          | 0/24\rLoading weights: 100%|##| 24/24",
    "(TaskRunnerV1 pid=1987) INFO:2026-11-25 20:41:36,973:actor and ref model engine initialized",
    "(vLLMHttpServer pid=3091) WARNING 11-25 20:42:17 [vllm.py:1285] Enforce eager set",
    "(TaskRunnerV1 pid=1987) LLMServerManager: ['192.0.2.2:43801']",
    "(TaskRunnerV1 pid=1987) INFO:2026-11-25 20:42:43,898:Training from scratch",
    "(TaskRunnerV1 pid=1987) [arise] step 1/6 | phase 1 | acc 0.500 | 3.1s",
]
SHOWN = [
    "Ray started",
    "data: train dataset size: 165, val dataset size: 12",
    "actor engine (FSDP) ready",
    "rollout server ready",
    "Training from scratch",
    "[arise] step 1/6 | phase 1 | acc 0.500 | 3.1s",
]


def _strip_clock(lines):
    return [re.sub(r"^\[(arise|eval)\] \d+:\d\d ", "", line) for line in lines]


def test_python_filter_shows_what_starts_and_the_steps():
    out = io.StringIO()
    console = ConsoleFilter("[eval]", out=out)
    for line in LOG:
        console.feed(line + "\n")
    assert _strip_clock(out.getvalue().splitlines()) == SHOWN


def test_progress_line_during_a_silent_wait():
    now = [0.0]
    out = io.StringIO()
    console = ConsoleFilter("[eval]", out=out, clock=lambda: now[0])
    console.feed(LOG[2])
    now[0] = 45.0
    console.feed(LOG[1])  # noise after 45 s without a shown line
    assert out.getvalue().splitlines()[-1] == "[eval] 0:45 ... 2 log lines (0/s); last: Ray started"
    now[0] = 90.0
    console.feed(LOG[1])  # the stage stays the last thing that started
    assert out.getvalue().splitlines()[-1] == "[eval] 1:30 ... 3 log lines (0/s); last: Ray started"
