"""What a launch leaves on the machine outside its output folder, named so that it can be removed.

Two kinds of files outlive the processes that made them when those are killed (and vLLM's even
when its engine ends normally: Ray ends its actors without running ``__del__``):

- vLLM's shared-memory message queues (``multiprocessing.shared_memory``: ``/dev/shm/psm_*``,
  ~420 MB per CPU engine, RAM-backed), unlinked only by their creator's ``__del__``, and the
  named semaphores of ``multiprocessing`` locks (``/dev/shm/sem.mp-*``, left when the resource
  tracker that would unlink them is killed with the run);
- the sandbox's working folders (``$TMPDIR/arise-sandbox-*``), removed when a tool call returns.

The launcher (``recipe.arise.tools.launch``) gives each launch a tag, ``ARISE_RUN_TAG=<pid>.<start>``
(its own pid and that process's start time), in every process's environment. With it, shared
memory is named ``psm_arise.<tag>.<hex>``, semaphores ``sem.mp-arise.<tag>-<n>``
(``name_shared_memory``, called by the verl and vLLM plugins in every process that imports either)
and sandbox folders ``arise-sandbox-<tag>-*``: the launcher removes its own at
exit, and a launch whose launcher was itself killed is swept by the next launch (its launcher pid
no longer runs with that start time). Files without the tag (another program's, an untagged run's)
are never touched.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
from pathlib import Path

TAG_ENV = "ARISE_RUN_TAG"
SHM_DIR = Path("/dev/shm")
SHM_PREFIX = "psm_arise."  # Python's own prefix is psm_: the files still read as shared memory
SEM_PREFIX = "sem.mp-arise."  # a semaphore /mp-arise.<tag>-<n> is the file sem.mp-arise.<tag>-<n>
SANDBOX_PREFIX = "arise-sandbox-"
_TAG = re.compile(r"^(\d+)\.(\d+)$")


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot: /proc/PID/stat field 22), None if gone
    or dead: a killed launcher whose parent never reaps it (PID 1 of some containers) stays a
    zombie, still listed in /proc with its start time, and its files would never be swept."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # the fields after the command name (which may hold spaces)
    if fields[0] in ("Z", "X"):  # field 3, the state: zombie or dead
        return None
    return fields[19]


def new_tag(pid: int | None = None) -> str:
    """This process's tag: its pid and start time (a reused pid has another start time)."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{_start_time(pid) or 0}"


def tag_alive(tag: str) -> bool:
    """Whether the launcher that owns ``tag`` still runs (a malformed tag counts as alive: kept)."""
    match = _TAG.match(tag)
    if not match:
        return True
    return _start_time(int(match.group(1))) == match.group(2)


def current_tag() -> str | None:
    tag = os.environ.get(TAG_ENV, "")
    return tag if _TAG.match(tag) else None


def name_shared_memory() -> None:
    """Name this process's new ``SharedMemory`` blocks and semaphores after the launch (no-op
    without a tag).

    ``multiprocessing.shared_memory`` draws names as ``_SHM_NAME_PREFIX`` + random hex, capped at
    ``_SHM_SAFE_NAME_LENGTH`` (14, for macOS); Linux allows 255. A ``multiprocessing`` semaphore is
    named ``<semprefix>-<n>`` (the process's ``semprefix``, ``/mp``)."""
    tag = current_tag()
    if tag is None:
        return
    import multiprocessing.process
    from multiprocessing import shared_memory

    prefix = f"/{SHM_PREFIX}{tag}."
    shared_memory._SHM_NAME_PREFIX = prefix
    shared_memory._SHM_SAFE_NAME_LENGTH = len(prefix) + 16
    multiprocessing.process.current_process()._config["semprefix"] = f"/{SEM_PREFIX[4:]}{tag}"


def sandbox_prefix() -> str:
    """The prefix of a sandbox folder (``tempfile.mkdtemp``): the launch's tag in it when set."""
    tag = current_tag()
    return f"{SANDBOX_PREFIX}{tag}-" if tag else SANDBOX_PREFIX


def temp_dir(env: dict) -> str:
    """The folder ``tempfile`` picks in a process with the environment ``env``."""
    for name in ("TMPDIR", "TEMP", "TMP"):
        if env.get(name) and os.path.isdir(env[name]):
            return env[name]
    return tempfile.gettempdir()


def files_of(tag: str, shm_dir: Path = SHM_DIR, tmp_dir: str | None = None) -> list[Path]:
    """The shared-memory files and sandbox folders named after ``tag`` (sandbox folders in
    ``tmp_dir``, default this process's temporary folder)."""
    tmp = tmp_dir or tempfile.gettempdir()
    shm = glob.escape(str(shm_dir))
    found = glob.glob(os.path.join(shm, f"{SHM_PREFIX}{tag}.*")) + glob.glob(os.path.join(shm, f"{SEM_PREFIX}{tag}-*"))
    found += glob.glob(os.path.join(glob.escape(tmp), f"{SANDBOX_PREFIX}{tag}-*"))
    return sorted(Path(p) for p in found)


def remove(paths: list[Path]) -> tuple[int, int]:
    """Remove files and folders; returns (how many, bytes). Another user's are skipped."""
    count = size = 0
    for path in paths:
        try:
            if path.is_dir() and not path.is_symlink():
                size += sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())
                shutil.rmtree(path)
            else:
                size += path.lstat().st_size
                path.unlink()
            count += 1
        except OSError:
            continue  # gone meanwhile, or not ours to remove (/dev/shm and /tmp are sticky)
    return count, size


def dead_tags(shm_dir: Path = SHM_DIR, tmp_dir: str | None = None) -> set[str]:
    """Tags of launches whose launcher no longer runs but whose files are still there."""
    tmp = tmp_dir or tempfile.gettempdir()
    tags = set()
    for path in glob.glob(os.path.join(glob.escape(str(shm_dir)), f"{SHM_PREFIX}*")):
        tags.add(".".join(os.path.basename(path)[len(SHM_PREFIX) :].split(".")[:2]))
    for path in glob.glob(os.path.join(glob.escape(str(shm_dir)), f"{SEM_PREFIX}*")):
        tags.add(os.path.basename(path)[len(SEM_PREFIX) :].split("-")[0])
    for path in glob.glob(os.path.join(glob.escape(tmp), f"{SANDBOX_PREFIX}*")):
        tags.add(os.path.basename(path)[len(SANDBOX_PREFIX) :].split("-")[0])
    return {t for t in tags if _TAG.match(t) and not tag_alive(t)}
