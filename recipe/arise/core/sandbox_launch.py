"""Command lines and process plumbing of the python sandbox (recipe/arise/core/sandbox.py): bwrap's
arguments, the launcher that sets the limits and drops the uid, and the per-uid process sweep."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import site
import stat
import sys
import time

CAP_DAC_READ_SEARCH = 2


def python_roots() -> list[str]:
    """Directories the interpreter needs: its prefixes and where numpy / sympy live."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    roots.update(p for p in site.getsitepackages() if os.path.isdir(p))
    for name in ("numpy", "sympy", "mpmath"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            roots.add(os.path.dirname(os.path.dirname(spec.origin)))
    roots = {os.path.realpath(r) for r in roots} | roots
    # a root under another one is bound with it
    keep = sorted(r for r in roots if os.path.isdir(r))
    return [r for r in keep if not any(r != o and r.startswith(o.rstrip("/") + "/") for o in keep)]


def bwrap_argv(bwrap: str, workdir: str, as_root: bool) -> list[str]:
    """bwrap's command line. As root, bwrap runs without a user namespace (inside one the process
    limit would not hold for root's uid) and keeps only CAP_SETUID/CAP_SETGID, which the launcher
    inside uses to become the run's own uid before it execs the code."""
    if as_root:
        argv = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv = [bwrap, "--unshare-all", "--cap-drop", "ALL"]
    argv += ["--die-with-parent", "--new-session"]
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    # /tmp first: an interpreter under /tmp (a venv in a clone there) is bound on top of the tmpfs
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "01777", "--tmpfs", "/tmp"]
    made: set[str] = {"/tmp"}
    for root in python_roots():
        if root.startswith("/usr/"):
            continue
        # parents made searchable: bwrap would copy a private parent's mode (/root is 0700)
        parts = root.split("/")
        for i in range(2, len(parts)):
            parent = "/".join(parts[:i])
            if parent not in made:
                made.add(parent)
                argv += ["--perms", "0755", "--dir", parent]
        argv += ["--ro-bind", root, root]
    argv += ["--bind", workdir, "/sandbox", "--chdir", "/sandbox"]
    argv += ["--setenv", "HOME", "/sandbox", "--setenv", "TMPDIR", "/tmp"]
    return argv


def readable_by_others(path: str) -> bool:
    """Can an unrelated uid reach `path` (every parent directory searchable by others)?"""
    path = os.path.realpath(path)
    parts = path.split("/")
    for i in range(2, len(parts) + 1):
        try:
            mode = os.stat("/".join(parts[:i]) or "/").st_mode
        except OSError:
            return False
        if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
            return False
    return True


def interpreter_private() -> bool:
    return not all(readable_by_others(p) for p in (sys.executable, sys.base_prefix, sys.prefix))


# The launcher: a tiny interpreter that sets the limits, drops the uid and execs the real command.
# RLIMIT_NPROC: the kernel counts the tasks (threads included) of the uid, since Linux 5.14 per user
# namespace. Not root, the run shares its uid with the trainer (a Ray worker has dozens of threads):
# "userns" gives it a user namespace of its own (the same uid inside) before the limit is set, so
# the limit counts only its tasks; where it has none (no unprivileged user namespaces, an older
# kernel), "uid_tasks" (the uid's tasks when the run started) is added to the limit instead.
LAUNCHER = r"""
import ctypes, json, os, re, resource, sys
spec = json.loads(sys.argv[1])
argv = spec["argv"]
libc = ctypes.CDLL(None, use_errno=True)
if spec.get("userns"):
    uid, gid = os.getuid(), os.getgid()
    if libc.unshare(0x10000000) == 0:  # CLONE_NEWUSER; the same uid and gid inside
        try:  # unmapped, the run is "nobody" inside, and still counted alone
            for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
                with open(f"/proc/self/{name}", "w") as f:
                    f.write(text)
        except OSError:
            pass
if spec.get("uid_tasks") is not None:
    own_ns = os.stat("/proc/self/ns/user").st_ino != spec["host_userns"]
    if not (own_ns and tuple(map(int, re.findall(r"\d+", os.uname().release)[:2])) >= (5, 14)):
        spec["rlimits"]["RLIMIT_NPROC"] = [v + spec["uid_tasks"] for v in spec["rlimits"]["RLIMIT_NPROC"]]
for name, value in spec["rlimits"].items():
    resource.setrlimit(getattr(resource, name), (value[0], value[1]))
if spec["uid"] is not None:
    if spec["keep_read"]:
        libc.prctl(8, 1, 0, 0, 0)  # PR_SET_KEEPCAPS
    os.setgroups([])
    os.setgid(spec["gid"])
    os.setuid(spec["uid"])
    if spec["keep_read"]:
        # keep only CAP_DAC_READ_SEARCH (ambient) so the interpreter under a private prefix loads
        bit = 1 << spec["keep_read"]
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)
        data = (ctypes.c_uint32 * 6)(bit, bit, bit, 0, 0, 0)
        if libc.capset(header, data) != 0 or libc.prctl(47, 2, spec["keep_read"], 0, 0) != 0:
            sys.exit("sandbox launcher: cannot keep read access to the interpreter")
os.execv(argv[0], argv)
"""


def launcher(spec: dict) -> list[str]:
    return [sys.executable, "-I", "-S", "-c", LAUNCHER, json.dumps(spec)]


def rlimits(limits, nproc: int) -> dict[str, tuple[int, int]]:
    mem = int(limits.memory_mb) * 1024 * 1024
    cpu = max(1, int(limits.cpu_s))
    fsize = int(limits.max_file_mb) * 1024 * 1024
    return {
        "RLIMIT_CORE": (0, 0),
        "RLIMIT_CPU": (cpu, cpu + 1),  # SIGXCPU at the soft limit, SIGKILL a second later
        "RLIMIT_AS": (mem, mem),
        "RLIMIT_FSIZE": (fsize, fsize),
        "RLIMIT_NOFILE": (int(limits.max_open_files), int(limits.max_open_files)),
        "RLIMIT_NPROC": (nproc, nproc),
    }


def tasks_of_uid(uid: int) -> list[int]:
    """Pids (threads included) whose real uid is `uid`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except OSError:
            continue
    return pids


def threads_of_uid(uid: int) -> int:
    """The tasks the kernel counts for RLIMIT_NPROC: the threads of every process whose real uid is `uid`."""
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                fields = dict(line.split(":", 1) for line in f if line.startswith(("Uid:", "Threads:")))
        except (OSError, ValueError):
            continue
        if "Uid" in fields and int(fields["Uid"].split()[0]) == uid:
            total += int(fields.get("Threads", "1"))
    return total


def host_userns() -> int:
    """This process's user namespace (its inode): the launcher compares its own with it."""
    return os.stat("/proc/self/ns/user").st_ino


def sweep_uid(uid: int) -> None:
    """Kill every process of a run's private uid (forks that left the process group included)."""
    for _ in range(200):
        pids = tasks_of_uid(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.01)
