"""Crash safety of the library's parquet save (and of the per-step library log).

A harness process (a fresh interpreter that has imported pyarrow but never used it, so forking it
is safe) forks one child per trial. The child saves alternating library versions to the same
path in a tight loop and reports each completed save through a pipe; the harness SIGKILLs it after
a random delay of 1-30 ms, i.e. almost always in the middle of a save. Afterwards the file on disk
must be a complete version -- the last one the child reported or the one it was writing (its
``os.replace`` may land before the report) -- never a partial or mixed file, and the only other
files allowed in the folder are the hidden temp files of interrupted saves, which neither the
loaders nor the checkpoint discovery of ``recipe.arise.tools.inspect_run`` pick up.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_log import read_log
from recipe.arise.core.library_store import LibraryFormatError
from recipe.arise.tools.inspect_run import resolve_library_path

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(
    not hasattr(os, "fork") or sys.platform != "linux", reason="the kill harness forks (Linux)"
)
LIB_TRIALS = 120
LOG_TRIALS = 40
TMP_RE = re.compile(r"^\.library\.parquet\.[A-Za-z0-9_]+\.tmp$")
LOG_TMP_RE = re.compile(r"^\.step_\d{8}\.parquet\.[A-Za-z0-9_]+\.tmp$")  # write_table_atomic's temp files

# Shared by the test and the harness (exec'd in both): three clearly different library versions.
VERSIONS_SRC = textwrap.dedent(
    """
    def make_versions():
        from recipe.arise.core.library import SkillLibrary
        from recipe.arise.core.skill import SkillDoc

        def doc(i, tag):
            return SkillDoc(f"{tag}_skill_{i}", ("algebra", "geometry", "number_theory")[i % 3],
                            f"Key insight number {i} of version {tag}, long enough to matter",
                            (f"Step one for {i}", f"Step two for {i}", "Check the result"), "Plug in")

        def build(tag, cache, reservoir, n_new, uses):
            lib = SkillLibrary(cache_capacity=cache, reservoir_capacity=reservoir)
            step = 0
            while len(lib) < min(n_new, cache + reservoir):
                step += 1
                new = [doc(step * 100 + j, tag) for j in range(20)]
                obs = [(sid, float((k + step) % 3)) for k, sid in enumerate(lib.cache_ids()[:uses])]
                lib.step(obs, new, step=step, global_rewards=[r for _, r in obs] + [1.0])
            return lib

        return [build("a", 10, 100, 110, 6), build("b", 10, 40, 50, 3), build("c", 3, 0, 3, 1)]
    """
)

HARNESS = VERSIONS_SRC + textwrap.dedent(
    """
    import json, os, random, signal, struct, sys, time
    import pandas, pyarrow, pyarrow.parquet  # imported before forking (pyarrow imports pandas lazily), never used here
    from pathlib import Path

    mode, base, trials, seed = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    libs = make_versions()
    rng = random.Random(seed)

    def child_library(path, w):
        j = 0
        while True:
            j += 1
            libs[j % len(libs)].save(path)
            os.write(w, struct.pack("<I", j))

    def child_log(d, w):
        from recipe.arise.core.library_log import write_step_log
        from recipe.arise.core.library_entry import StepEvents
        j = 0
        while True:
            j += 1
            lib = libs[j % len(libs)]
            write_step_log(d, j, 1 + (j > 5), StepEvents(step=j, added=lib.cache_ids()[:2]), lib)
            os.write(w, struct.pack("<I", j))

    for t in range(trials):
        d = base / f"trial_{t:03d}"
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child
            code = 0
            try:
                os.close(r)
                os.write(w, b"R")
                if mode == "library":
                    child_library(d / "library.parquet", w)
                else:
                    child_log(d, w)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(w)
        assert os.read(r, 1) == b"R"
        # every other trial waits for the child's first complete write, so that however busy the
        # cores are, half the trials kill a writer that has files on disk already
        data = os.read(r, 4) if t % 2 else b""
        delay = rng.uniform(0.001, 0.030)
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
        os.close(r)
        done = [struct.unpack("<I", data[i:i + 4])[0] for i in range(0, len(data) - len(data) % 4, 4)]
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        print(json.dumps({"trial": t, "dir": str(d), "delay_ms": round(delay * 1000, 2),
                          "last": done[-1] if done else 0, "signal": sig}), flush=True)
    """
)


def make_versions() -> list[SkillLibrary]:
    ns: dict = {}
    exec(VERSIONS_SRC, ns)
    return ns["make_versions"]()


def run_harness(mode: str, base: Path, trials: int, seed: int) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS, mode, str(base), str(trials), str(seed)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(results) == trials
    assert all(r["signal"] == 9 for r in results), "every child must die by SIGKILL (none may exit on its own)"
    return results


@pytest.fixture(scope="module")
def versions():
    libs = make_versions()
    assert len({json.dumps(v.state_dict(), sort_keys=True) for v in libs}) == len(libs)
    return libs


def test_sigkill_during_save_never_leaves_a_partial_library(tmp_path, versions):
    k = len(versions)
    no_initial = set(range(0, LIB_TRIALS, 10))  # every 10th trial starts with no file at all
    for t in range(LIB_TRIALS):
        d = tmp_path / f"trial_{t:03d}"
        d.mkdir()
        if t not in no_initial:
            versions[0].save(d / "library.parquet")  # the "earlier version" (save number 0)
    results = run_harness("library", tmp_path, LIB_TRIALS, seed=1234)

    killed_mid_save = saves = absent = 0
    for res in results:
        d, last = Path(res["dir"]), res["last"]
        path = d / "library.parquet"
        saves += last
        others = sorted(n for n in os.listdir(d) if n != "library.parquet")
        bad = [n for n in others if not TMP_RE.match(n)]
        assert not bad, f"trial {res['trial']}: unexpected files {bad}"
        assert len(others) <= 1, f"trial {res['trial']}: more than one temp file {others}"
        killed_mid_save += bool(others)
        if not path.exists():
            # only possible when there was no earlier file and the first save never completed
            assert res["trial"] in no_initial and last == 0, res
            absent += 1
            continue
        lib = SkillLibrary.load(path)  # raises LibraryFormatError on a partial file
        allowed = {(last + i) % k for i in (0, 1)}
        if res["trial"] in no_initial and last == 0:
            allowed = {1 % k}  # no earlier version: only the first save can be there
        matches = [i for i in range(k) if lib == versions[i]]
        assert matches and matches[0] in allowed, (
            f"trial {res['trial']}: on disk version {matches}, allowed {allowed} ({res})"
        )
        # the temp files are never taken for the library
        assert resolve_library_path(d) == path
        assert pq.read_table(d).num_rows == len(lib)  # parquet dataset discovery skips hidden files
        for name in others:
            try:
                SkillLibrary.load(d / name)  # a temp file may be complete or partial: never trusted blindly
            except LibraryFormatError:
                pass
    # the kills really landed inside saves, and the children made progress
    assert killed_mid_save >= LIB_TRIALS // 10, (killed_mid_save, saves)
    assert saves >= LIB_TRIALS // 4, (killed_mid_save, saves)


def test_sigkill_during_library_log_writes_keeps_every_step_file_complete(tmp_path, versions):
    for t in range(LOG_TRIALS):
        (tmp_path / f"trial_{t:03d}").mkdir()
    results = run_harness("log", tmp_path, LOG_TRIALS, seed=99)
    n_files = 0
    for res in results:
        d = Path(res["dir"])
        log_dir = d / "library_log"
        names = sorted(os.listdir(log_dir)) if log_dir.is_dir() else []
        steps = sorted(int(n[5:13]) for n in names if re.fullmatch(r"step_\d{8}\.parquet", n))
        others = [n for n in names if not re.fullmatch(r"step_\d{8}\.parquet", n)]
        assert all(LOG_TMP_RE.match(n) for n in others), others
        last = res["last"]
        # steps 1..last are complete; last+1 may also be there (renamed before the report)
        assert steps in (list(range(1, last + 1)), list(range(1, last + 2))), (steps, res)
        if not steps:
            continue
        n_files += len(steps)
        df = read_log(d)  # reads step_*.parquet only: temp files never mix in
        assert sorted(df["step"].unique().tolist()) == steps
        for s in steps:
            lib = versions[s % len(versions)]
            state = df[(df["step"] == s) & (df["event"] == "state")]
            assert sorted(state["skill_id"]) == sorted(e.skill_id for e in lib.entries())
    assert n_files >= LOG_TRIALS // 4


def _proc_reports_umask() -> bool:
    try:
        return any(line.startswith("Umask:") for line in Path("/proc/self/status").read_text().splitlines())
    except OSError:
        return False


@pytest.mark.parametrize("source", ["proc", "set_and_restore"])
@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_atomic_writes_get_the_umask_permissions_not_mkstemps(tmp_path, monkeypatch, source, umask, mode):
    """A library written into a shared checkpoint folder is as readable as the model shards beside it.

    The umask is read from /proc/self/status without touching it (toggling it races with other
    threads' file creation); where that is unavailable it is set and restored under a lock."""
    from recipe.arise.core import store

    if source == "proc" and not _proc_reports_umask():
        pytest.skip("this kernel does not report the umask in /proc/self/status")
    old = os.umask(umask)
    try:
        if source == "proc":
            monkeypatch.setattr(store.os, "umask", lambda *_: pytest.fail("the umask was toggled"))
        else:
            monkeypatch.setattr(store, "_PROC_STATUS", str(tmp_path / "no_such_status"))
        assert store.current_umask() == umask
        path = tmp_path / "library.parquet"
        SkillLibrary().save(path)
        assert stat.S_IMODE(path.stat().st_mode) == mode
        monkeypatch.undo()
        assert os.umask(umask) == umask  # still the process umask: reading it changed nothing
    finally:
        monkeypatch.undo()
        os.umask(old)
