"""One Java VM behind py4j, for the Java environments (TextWorldExpress, ScienceWorld).

The packages' own Python wrappers start the JVM without JVM options, with a callback server we do
not use and a ``__del__`` that writes to a dead JVM's stdin; we drive their Java ``PythonInterface``
directly instead. The JVM is started with py4j's ``die_on_exit``: it exits when its stdin closes,
i.e. when this Python process ends, also on SIGKILL (tests/envs/test_textworld_express.py).
"""

from __future__ import annotations

import logging
import shutil
import subprocess

__all__ = ["JavaVM", "java_missing"]

INSTALL_JAVA = "apt-get install -y default-jre-headless"


def java_missing() -> str | None:
    """Why Java cannot run here (with the command that installs it), or None when it can."""
    if shutil.which("java") is None:
        return f"java is not on PATH: {INSTALL_JAVA}"
    try:
        subprocess.run(["java", "-version"], capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as error:
        return f"java -version failed ({error}): {INSTALL_JAVA}"
    return None


def quiet_py4j() -> None:
    """py4j logs a traceback for every call to a JVM that has died (a crash, a kill on timeout): the
    caller reports that failure once, as the episode's (recipe/arise/envs/runner.py)."""
    from py4j import clientserver, java_gateway

    for module in (java_gateway, clientserver):
        module.logger.setLevel(logging.CRITICAL)


class JavaVM:
    """A JVM running ``jar`` with ``javaopts``; ``jvm`` is py4j's view of its packages."""

    def __init__(self, jar: str, javaopts: list[str] | None = None, cwd: str | None = None):
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway

        quiet_py4j()

        if (why := java_missing()) is not None:
            raise RuntimeError(why)
        port, self.process = launch_gateway(
            classpath=jar, javaopts=list(javaopts or []), die_on_exit=True, cwd=cwd, return_proc=True
        )
        # no py4j memory management: its weakref finalizers call the JVM when a Java object's proxy is
        # dropped, and once the JVM is killed that failing call inside a GC pass corrupts CPython
        # 3.11's recursion count ("SystemError: AST constructor recursion depth mismatch" on a later
        # compile). The JVM dies with the environment, and its objects with it.
        params = GatewayParameters(port=port, auto_field=True, enable_memory_management=False)
        try:
            self._gateway = JavaGateway(gateway_parameters=params)
        except BaseException:
            self.process.kill()
            raise
        self.jvm = self._gateway.jvm

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """Kill the JVM now (a hung call on it then raises Py4JError) and drop the connection."""
        if self.process.poll() is None:
            self.process.kill()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        try:
            self._gateway.close(keep_callback_server=False, close_callback_server_connections=False)
        except Exception:  # noqa: BLE001 - the connection to a killed JVM may fail any way; it is gone either way
            pass
