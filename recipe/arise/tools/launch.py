"""Every launch's start-up path: training, the baselines (``run_scripts/common.sh``'s ``run_main``) and
the evaluation (``recipe.arise.tools.evaluate``) start their run through :func:`launch`.

``python -m recipe.arise.tools.launch [--log FILE] [--prefix '[arise]'] -- COMMAND...``

- **One log per launch.** With ``--log``, the whole output (Ray, vLLM, verl) goes to FILE and the
  console gets the concise view (``recipe.arise.tools.console``; ``VERBOSE=1``: every line). An
  earlier launch's FILE (a killed run's: the one file that says why it died) is moved to the next
  free ``<stem>.launchN<suffix>`` first (``run.launch1.log``, ...), as its metrics are.
- **A full log disk keeps the cause.** The run's last lines are kept in memory, not read back from
  FILE: when writing FILE fails the console says so and still gets, on failure, those last lines.
- **Ray's start-up.** Ray waits a fixed 30 s (``ray/_private/node.py``, not configurable) for its
  raylet to register; on an overloaded machine the run can die with "The current node timed out
  during startup" before any of it started. That is launched once more, saying so; a second
  time, the console says what it means.
- **Nothing of the run stays on the machine.** Its processes carry ``ARISE_LAUNCH_ATTEMPT``; whatever
  of them outlives an attempt (a failed Ray start leaves its GCS and raylet running) is killed.
  Its shared memory and sandbox folders carry its tag (``recipe.arise.core.run_files``) and are
  removed at exit, the trainer killed or not; a launch whose launcher itself was killed is swept
  by the next launch.
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from recipe.arise.core import run_files
from recipe.arise.tools.console import ConsoleFilter

MARKER_ENV = "ARISE_LAUNCH_ATTEMPT"
RAY_START_TIMEOUT = "The current node timed out during startup"
STARTED = "Training Progress"  # verl's progress bar: the run got past start-up
KEEP_LINES = 60
RAY_HINT = (
    "Ray's node did not register within Ray's fixed 30 s twice: the machine is too busy to start Ray "
    "(`uptime`: its load; other runs?). Launch again when it is quieter."
)


def rotate_log(path: Path) -> Path | None:
    """A non-empty ``path`` becomes its next free launch part, ``<stem>.launchN<suffix>``."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    n = 1
    while (aside := path.with_name(f"{path.stem}.launch{n}{path.suffix}")).exists():
        n += 1
    path.rename(aside)
    return aside


def stop_marked(marker: str, passes: int = 5) -> int:
    """SIGKILL every process whose environment holds ``ARISE_LAUNCH_ATTEMPT=marker``: scans until one
    finds none, twice at least (a process in the middle of ``exec``, or forked meanwhile, is caught
    by the next)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    killed = 0
    for scan in range(passes):
        found = 0
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                with open(f"/proc/{entry.name}/environ", "rb") as f:
                    if needle not in f.read().split(b"\0"):
                        continue
                os.kill(int(entry.name), signal.SIGKILL)
                found += 1
            except OSError:
                continue  # gone, or another user's
        killed += found
        if not found and scan > 0:  # two scans at least: one may miss a process in the middle of exec
            break
        time.sleep(0.1)
    return killed


class _Output:
    """The run's lines: to the log (while it can be written), the console, and the last lines kept."""

    def __init__(self, log, prefix: str, verbose: bool):
        self.log, self.prefix, self.verbose = log, prefix, verbose
        self.console = None if verbose else ConsoleFilter(prefix)
        self.tail: collections.deque[str] = collections.deque(maxlen=KEEP_LINES)
        self.log_error: OSError | None = None

    def write_log(self, line: str) -> None:
        if self.log is None or self.log_error is not None:
            return
        try:
            self.log.write(line)
            self.log.flush()
        except OSError as error:
            self.log_error = error
            print(f"{self.prefix} writing {self.log.name} failed: {error}", file=sys.stderr, flush=True)

    def feed(self, line: str) -> None:
        self.tail.append(line.rstrip("\n"))
        self.write_log(line)
        if self.console is None:
            sys.stdout.write(line)
            sys.stdout.flush()
        else:
            self.console.feed(line)


def run_attempt(cmd: list[str], env: dict, out: _Output, marker: str) -> tuple[int, bool, bool]:
    """One attempt; returns (exit status, Ray's start timed out, the run got past start-up).

    The output is read in a thread: a process the command leaves behind (a failed Ray start's GCS
    and raylet) holds the pipe open until it is stopped, once the command has exited."""
    seen = {"ray_timeout": False, "started": False}
    done = threading.Event()
    env = {**env, MARKER_ENV: marker}
    if out.log is None:  # the whole output on the console, as when it wrote to the terminal: line by line
        env.setdefault("PYTHONUNBUFFERED", "1")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, errors="replace")

    def read():
        for line in proc.stdout:
            seen["ray_timeout"] = seen["ray_timeout"] or RAY_START_TIMEOUT in line
            seen["started"] = seen["started"] or STARTED in line
            out.feed(line)

    def heartbeat():
        while not done.wait(5.0):
            out.console.tick()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    if out.console is not None:
        threading.Thread(target=heartbeat, daemon=True).start()
    try:
        rc = proc.wait()
    finally:
        if proc.poll() is None:  # interrupted: let the run end itself, then make sure
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        stop_marked(marker)
        rc = proc.wait()
        reader.join(timeout=30)
        done.set()
    out.tail.append(f"{out.prefix} exit status {rc}")
    out.write_log(out.tail[-1] + "\n")
    return rc, seen["ray_timeout"], seen["started"]


def _on_signal(signum, frame):
    raise SystemExit(128 + signum)  # the finally clauses stop the run and remove its files


def launch(cmd: list[str], log_path: Path | None = None, prefix="[arise]", verbose=False, env=None) -> int:
    """Run ``cmd`` as described in the module's docstring; returns its exit status."""
    tag = run_files.new_tag()
    env = {**(os.environ if env is None else env), run_files.TAG_ENV: tag}
    tmp = run_files.temp_dir(env)
    _sweep(prefix, tmp)
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        for attempt in (1, 2):
            log = None
            if log_path is not None:
                log_path.parent.mkdir(parents=True, exist_ok=True)
                aside = rotate_log(log_path)
                if aside is not None:
                    print(f"{prefix} the previous {'attempt' if attempt > 1 else 'launch'}'s log: {aside}", flush=True)
                if attempt == 1:
                    print(f"{prefix} full log: {log_path} (VERBOSE=1 shows it all here)", flush=True)
                log = open(log_path, "w", errors="replace")
            try:
                out = _Output(log, prefix, verbose or log is None)
                rc, ray_timeout, started = run_attempt(cmd, env, out, f"{tag}-{attempt}")
            finally:
                if log is not None:
                    try:
                        log.close()
                    except OSError:
                        pass
            if rc == 0 or not ray_timeout or started:
                break
            if attempt == 1:
                print(f"{prefix} Ray's node did not register within Ray's fixed 30 s (busy machine?): launching again")
            else:
                print(f"{prefix} {RAY_HINT}", file=sys.stderr)
        if out.log_error is not None:
            print(f"{prefix} {log_path} is incomplete: writing it failed (see above; a full disk?)", file=sys.stderr)
        if rc != 0 and not out.verbose:  # the cause is at the end of the run's output
            lines = list(out.tail)[:-1]
            print(f"{prefix} the run failed (exit {rc}); its last {len(lines)} lines:", file=sys.stderr)
            print("\n".join(lines), file=sys.stderr, flush=True)
        return rc
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        removed, size = run_files.remove(run_files.files_of(tag, tmp_dir=tmp))
        if removed:
            print(f"{prefix} removed the run's shared memory and sandbox folders ({removed}, {size / 2**20:.0f} MiB)")


def _sweep(prefix: str, tmp: str) -> None:
    """Remove what earlier launches, whose launcher was killed, left behind."""
    for tag in sorted(run_files.dead_tags(tmp_dir=tmp)):
        removed, size = run_files.remove(run_files.files_of(tag, tmp_dir=tmp))
        if removed:
            print(f"{prefix} removed {removed} file(s) left by a killed launch ({tag}, {size / 2**20:.0f} MiB)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m recipe.arise.tools.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, help="the run's whole output goes here; the console gets the concise view")
    parser.add_argument("--prefix", default="[arise]")
    parser.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND...")
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command (after --)")
    try:
        return launch(cmd, args.log, args.prefix, verbose=os.environ.get("VERBOSE") == "1")
    except KeyboardInterrupt:  # Ctrl-C: the run was stopped and its files removed on the way out
        return 130


if __name__ == "__main__":
    sys.exit(main())
