"""A preloaded fork server ("zygote") for ``python -c`` probes.

The contract tests run their probes as ``python -c code args``; each fresh interpreter spends most
of its CPU importing torch / transformers / vLLM / verl. A ``Zygote`` is one long-lived interpreter,
started with the environment and working directory a probe would get, that imports a preload list
once and then forks a child per probe. The child runs the code as ``python -c`` would: a fresh
``__main__``, ``sys.argv == ["-c", *args]``, its stdout / stderr redirected at the fd level (C-level
output and subprocesses' output are captured too), exit code 0 / ``SystemExit``'s / 1 with the
traceback on stderr on an uncaught exception. Whatever a probe changes (modules, ``os.environ``,
the working directory) dies with its child.

Fork safety: the zygote starts no thread. After each preload it checks that no Python thread runs
and that no native thread outlives a trial fork (OpenBLAS, which numpy loads, shuts its pool down
in a fork handler and restarts it lazily; pyarrow's jemalloc thread does not); a preload that
leaves one refuses the start, naming the module.

Parent side: ``Zygote(env, cwd, preload, idle_s).run(code, args, timeout)`` -> ``(returncode,
stdout, stderr)``; raises ``subprocess.TimeoutExpired`` (the child killed) on timeout, ``ZygoteError``
when the zygote cannot start or is gone (the caller then runs a fresh subprocess). ``close()`` ends
it; with ``idle_s`` it also ends itself after that long without a probe (its memory back) and the
next ``run`` starts it again.
"""

from __future__ import annotations

import atexit
import builtins
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types

# run by ``python -c`` so that the zygote's sys.path and __main__ are those of a probe; the module is
# loaded from its file under a private name (nothing added to sys.path)
BOOT = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_probe_zygote_server', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "spec.loader.exec_module(module)\n"
    "module.serve(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5:])\n"
)
KILL = b"kill\n"
REPLY_S = 30  # the zygote answers a request (fork) or a kill within this


class ZygoteError(RuntimeError):
    """The zygote did not start, or is gone."""


class _NothingRan(ZygoteError):
    """The zygote ended before it forked the probe."""


class _Lines:
    """Newline-terminated messages from a pipe, with a deadline."""

    def __init__(self, fd: int):
        self.fd, self.buffer = fd, b""

    def read(self, deadline: float | None = None) -> bytes | None:
        """The next line (without its newline); None at end of file; TimeoutError after ``deadline``."""
        while b"\n" not in self.buffer:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.fd], [], [], wait)[0]:
                raise TimeoutError
            chunk = os.read(self.fd, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return line


def _send(fd: int, message) -> None:
    os.write(fd, json.dumps(message).encode() + b"\n")  # one short write: atomic on a pipe


# ---------------------------------------------------------------------------------------------------
# zygote side


def _tasks() -> int:
    return len(os.listdir("/proc/self/task"))


def _trial_fork() -> int:
    """Native threads left after a fork (fork handlers, e.g. OpenBLAS's, stop their pools)."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return _tasks()


def _preload(modules: list[str]) -> dict:
    import importlib

    report = {}
    for name in modules:
        started = time.process_time()
        importlib.import_module(name)
        python, native = threading.active_count(), _trial_fork()
        report[name] = {"cpu_s": round(time.process_time() - started, 2), "threads": python, "tasks": native}
        if python != 1 or native != 1:
            raise ZygoteError(f"preloading {name} starts threads ({python} Python, {native} native): not fork-safe")
    return report


def serve(request_fd: int, reply_fd: int, idle_s: float, preload: list[str]) -> None:
    """The zygote's loop: preload, then one forked child per request until end of file, or until
    ``idle_s`` (> 0) pass without one (status 0: its memory back while no probe comes)."""
    for fd in (request_fd, reply_fd):
        os.set_inheritable(fd, False)  # probes' subprocesses must not hold the pipes
    sys.argv = ["-c"]  # as a probe's, for modules that read it at import
    try:
        report = _preload(preload)
    except BaseException as exc:  # the parent falls back to fresh subprocesses
        traceback.print_exc()
        sys.stdout.flush(), sys.stderr.flush()
        _send(reply_fd, {"error": "".join(traceback.format_exception_only(type(exc), exc)).strip()})
        os._exit(1)  # not waiting for threads a preload started
    _send(reply_fd, {"ready": report, "environ": dict(os.environ)})  # with what the preloads set
    requests = _Lines(request_fd)
    while True:
        try:
            line = requests.read(time.monotonic() + idle_s if idle_s > 0 else None)
        except TimeoutError:
            return
        if line is None:
            return
        if line == KILL.strip():  # for a child that has finished already
            continue
        request = json.loads(line)
        sys.stdout.flush(), sys.stderr.flush()  # nothing of the zygote's buffers in the child's output
        pid = os.fork()
        if pid == 0:
            _child(request, (request_fd, reply_fd))
        try:
            _send(reply_fd, {"pid": pid})
        except BrokenPipeError:  # the parent is gone: _wait sees the end of file and kills the child
            pass
        status, cpu = _wait(pid, requests)
        try:
            _send(reply_fd, {"rc": os.waitstatus_to_exitcode(status), "cpu_s": cpu})
        except BrokenPipeError:
            return


def _wait(pid: int, requests: _Lines) -> tuple[int, float]:
    """Wait for the child; kill it on a kill request or when the parent is gone (end of file)."""
    try:
        watch = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux < 5.3: poll
        watch = None
    try:
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                return status, round(usage.ru_utime + usage.ru_stime, 2)
            if watch is None:
                ready = select.select([requests.fd], [], [], 0.05)[0]
            else:
                ready = select.select([requests.fd, watch], [], [])[0]
            if requests.fd in ready and requests.read(time.monotonic() + REPLY_S) in (KILL.strip(), None):
                os.kill(pid, signal.SIGKILL)  # not reaped yet: the pid is still this child's
    finally:
        if watch is not None:
            os.close(watch)


def _child(request: dict, pipes: tuple[int, ...]) -> None:
    """Run one probe as ``python -c`` would; never returns."""
    code = 1
    try:
        for fd in pipes:
            os.close(fd)
        for target, path in ((1, request["stdout"]), (2, request["stderr"])):
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(fd, target)
            os.close(fd)
        main = types.ModuleType("__main__")
        main.__dict__.update(__loader__=sys.modules["__main__"].__loader__, __annotations__={}, __builtins__=builtins)
        sys.modules["__main__"] = main
        sys.argv = ["-c", *request["args"]]
        for name in request["unset"]:
            os.environ.pop(name, None)
        os.environ.update(request["set"])
        atexit._clear()  # the zygote's exit handlers are not the probe's to run
        _reseed()
        code = _execute(request["code"], main.__dict__)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush(), sys.stderr.flush()
        finally:
            os._exit(code)


def _reseed() -> None:
    """A fresh interpreter's random state (``random`` reseeds itself at fork; numpy and torch do not)."""
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    if "torch" in sys.modules:
        sys.modules["torch"].seed()


def _execute(code: str, namespace: dict) -> int:
    """Exec ``code`` in ``namespace`` and shut down as the interpreter does; the exit code."""
    try:
        exec(compile(code, "<string>", "exec"), namespace)
        code = 0
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:
        exc = exc.with_traceback(exc.__traceback__.tb_next)  # the traceback starts at "<string>"
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    try:
        threading._shutdown()  # join non-daemon threads, then the exit handlers, as at interpreter exit
        atexit._run_exitfuncs()
    except SystemExit as exc:
        code = _exit_code(exc)
    return code


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)  # sys.exit("message"): printed, status 1
    return 1


# ---------------------------------------------------------------------------------------------------
# parent side


class Zygote:
    """A fork server for ``python -c`` probes under ``env`` in ``cwd``, with ``preload`` imported."""

    def __init__(self, env: dict, cwd, preload=(), idle_s: float = 0, python=sys.executable, start_timeout=300.0):
        self.env, self.cwd, self.preload, self.idle_s = dict(env), str(cwd), list(preload), idle_s
        self.python, self.start_timeout = python, start_timeout
        self.proc = self.tmp = self.replies = self.requests = None
        self.report: dict | None = None
        self.environ: dict | None = None  # the zygote's os.environ after the preload: the children's

    def start(self) -> None:
        """Start the zygote and wait for its preload; ``ZygoteError`` when it fails."""
        self.tmp = tempfile.mkdtemp(prefix="probe-zygote-")
        request_r, self.requests = os.pipe()
        reply_r, reply_w = os.pipe()
        for fd in (self.requests, reply_r):
            os.set_inheritable(fd, False)
        log_path = os.path.join(self.tmp, "zygote.log")
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [self.python, "-c", BOOT, os.path.abspath(__file__), str(request_r), str(reply_w), str(self.idle_s)]
                + self.preload,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=(request_r, reply_w),
            )
        os.close(request_r), os.close(reply_w)
        self.replies = _Lines(reply_r)
        try:
            reply = self._reply(time.monotonic() + self.start_timeout)
            if "ready" not in reply:
                raise ZygoteError(reply["error"])
        except (ZygoteError, TimeoutError) as exc:
            tail = _tail(log_path)
            self.proc.kill()  # a preload that hangs
            self.close()
            raise ZygoteError(f"the zygote did not start: {exc!r}\n{tail}") from None
        self.report, self.environ = reply["ready"], reply["environ"]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def idled(self) -> bool:
        """Whether it ended after ``idle_s`` without a request (the only way it exits 0 unasked)."""
        return self.proc is not None and self.proc.poll() == 0

    def run(self, code: str, args=(), timeout: float | None = None, env: dict | None = None) -> tuple[int, str, str]:
        """``python -c code args`` in a forked child: (returncode, stdout, stderr). ``env``: the child's
        environment, where it ``differs`` set in ``os.environ`` after the preload (for variables no
        preloaded module reads at import). Started on first use, and again after idling."""
        self._started()
        try:
            return self._run(code, args, timeout, env)
        except _NothingRan:
            if not self.idled():
                raise
            self.restart()  # it idled out as the request went: the probe did not run
            return self._run(code, args, timeout, env)

    def restart(self) -> None:
        self.close()
        self.start()

    def _started(self) -> None:
        if self.proc is None or self.idled():
            self.restart()

    def differs(self, env: dict) -> set[str]:
        """The variables a probe under ``env`` would see otherwise than the children do; starts the
        zygote."""
        self._started()
        env = self._as_imported(env)
        return {k for k in env.keys() | self.environ.keys() if env.get(k) != self.environ.get(k)}

    def _as_imported(self, env: dict) -> dict:
        """``env`` after the preloads' imports: a variable a preload set (vLLM sets several), at its
        value from before in ``env``, takes the preload's value, as the probe's own import would set it
        (and where pytest imported that module already, ``env`` holds that value)."""
        env = dict(env)
        for k in self.env.keys() | self.environ.keys():
            if self.env.get(k) != self.environ.get(k) and env.get(k) == self.env.get(k):
                env.pop(k, None)
                if k in self.environ:
                    env[k] = self.environ[k]
        return env

    def _run(self, code: str, args, timeout: float | None, env: dict | None) -> tuple[int, str, str]:
        if not self.alive():
            raise ZygoteError(f"the zygote exited (status {self.proc.returncode})")
        env = self.environ if env is None else self._as_imported(env)
        changes = {
            "set": {k: v for k, v in env.items() if self.environ.get(k) != v},
            "unset": [k for k in self.environ if k not in env],
        }
        paths = [tempfile.mkstemp(dir=self.tmp, suffix=suffix) for suffix in (".out", ".err")]
        for fd, _ in paths:
            os.close(fd)
        (_, out), (_, err) = paths
        try:
            try:
                _send(self.requests, {"code": code, "args": list(args), "stdout": out, "stderr": err, **changes})
            except OSError as exc:  # the pipe is broken: the zygote is gone
                raise _NothingRan(f"the zygote is gone ({exc})") from None
            try:
                self._reply(time.monotonic() + REPLY_S)  # the fork happened: {"pid": ...}
            except TimeoutError:
                raise ZygoteError("the zygote does not answer") from None
            except ZygoteError as exc:
                raise _NothingRan(str(exc)) from None
            try:
                reply = self._reply(None if timeout is None else time.monotonic() + timeout)
            except TimeoutError:
                os.write(self.requests, KILL)
                try:
                    self._reply(time.monotonic() + REPLY_S)  # killed and reaped
                except (TimeoutError, ZygoteError):  # the next run finds it gone
                    pass
                raise subprocess.TimeoutExpired(
                    [self.python, "-c", code, *args], timeout, output=_read(out), stderr=_read(err)
                ) from None
            return reply["rc"], _read(out), _read(err)
        finally:
            for path in (out, err):
                os.unlink(path)

    def _reply(self, deadline: float | None) -> dict:
        try:
            line = self.replies.read(deadline)
        except TimeoutError:
            if deadline is not None and self.alive():
                raise
            line = None
        if line is None:
            raise ZygoteError(f"the zygote is gone (status {self.proc.wait()})")
        return json.loads(line)

    def close(self) -> None:
        """End the zygote (end of file on its requests; killed if it does not exit) and its files."""
        if self.requests is not None:
            os.close(self.requests)
            self.requests = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=REPLY_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.replies is not None:
            os.close(self.replies.fd)
            self.replies = None
        if self.tmp is not None:
            for name in os.listdir(self.tmp):
                os.unlink(os.path.join(self.tmp, name))
            os.rmdir(self.tmp)
            self.tmp = None


def _read(path: str) -> str:
    """A file's text as ``subprocess.run(text=True)`` decodes a pipe (locale encoding, universal newlines)."""
    with open(path) as f:
        return f.read()


def _tail(path: str, chars: int = 4000) -> str:
    with open(path, errors="replace") as f:
        return f.read()[-chars:]
