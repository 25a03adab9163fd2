"""The probe zygote (tests/helpers/probe_zygote.py) runs a probe as ``python -c`` would, keeps no
probe's changes for the next, kills a probe at its timeout, and ``Stack.run`` (conftest.py) falls
back to a fresh subprocess once the zygote is gone, never for a failing probe. On a zygote that
preloads only the standard library (fast)."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from probe_zygote import Zygote, ZygoteError

REPO = Path(__file__).resolve().parents[2]


def _start(env=None, preload=("json",)) -> Zygote:
    zygote = Zygote(dict(os.environ) if env is None else env, REPO, preload)
    zygote.start()
    return zygote


@pytest.fixture
def zygote():
    zygote = _start()
    yield zygote
    zygote.close()


@pytest.fixture
def contracts(request):
    """tests/contracts/conftest.py as pytest loaded it (its ``Stack`` and ``ZYGOTES``)."""
    path = str(Path(__file__).with_name("conftest.py"))
    return next(p for p in request.config.pluginmanager.get_plugins() if getattr(p, "__file__", None) == path)


PYTHON_C = {
    "argv_and_main": "import sys; print(sys.argv, __name__, sorted(globals()), sys.path[0] == '')",
    "both_streams": "import sys; print('out'); print('err', file=sys.stderr)",
    "fd_level_and_subprocess": "import os, subprocess; os.write(1, b'fd\\n'); subprocess.run(['echo', 'child'])",
    "exit_code": "import sys; print('before'); sys.exit(3)",
    "exit_message": "import sys; sys.exit('bye')",
    "exception": "import json\ndef f():\n    raise ValueError('no')\nf()",
    "syntax_error": "x = (",
    "thread_joined_at_exit": "import threading, time\nthreading.Thread(target=lambda: [time.sleep(0.2), print(1)])"
    ".start()",
    "atexit_runs": "import atexit; atexit.register(print, 'at exit')",
}


@pytest.mark.parametrize("code", PYTHON_C.values(), ids=PYTHON_C)
def test_a_probe_runs_as_python_c(zygote, code):
    fresh = subprocess.run([sys.executable, "-c", code, "a", "b c"], cwd=REPO, capture_output=True, text=True)
    assert zygote.run(code, ["a", "b c"], timeout=30) == (fresh.returncode, fresh.stdout, fresh.stderr)


def test_an_exception_exits_1_with_its_traceback(zygote):
    rc, out, err = zygote.run("print('partial')\nraise KeyError('missing')", timeout=30)
    assert (rc, out) == (1, "partial\n")
    assert err.startswith('Traceback (most recent call last):\n  File "<string>", line 2')
    assert err.endswith("KeyError: 'missing'\n") and "probe_zygote" not in err


def test_a_probe_changes_nothing_for_the_next(zygote, tmp_path):
    changes = (
        "import json, os, sys\n"
        "json.dumps = None; json.added = 1; sys.path.append('/nowhere'); import csv\n"
        "os.environ['PROBE_LEFT'] = '1'; os.environ.pop('HOME', None); os.chdir(sys.argv[1])\n"
        "globals()['leftover'] = 1\n"
    )
    assert zygote.run(changes, [str(tmp_path)], timeout=30)[0] == 0
    look = (
        "import json, os, sys\n"
        "print(json.dumps is not None, hasattr(json, 'added'), '/nowhere' in sys.path, 'csv' in sys.modules,\n"
        "      'PROBE_LEFT' in os.environ, 'HOME' in os.environ, os.getcwd(), 'leftover' in globals())"
    )
    home = "HOME" in os.environ
    assert zygote.run(look, timeout=30) == (0, f"True False False False False {home} {REPO} False\n", "")


def test_the_environment_is_the_zygotes_unless_given(zygote):
    code = "import os; print(os.environ.get('ZYGOTE_PROBE'), 'PATH' in os.environ)"
    env = {k: v for k, v in zygote.env.items() if k != "PATH"}
    assert zygote.run(code, timeout=30)[1] == "None True\n"
    assert zygote.run(code, timeout=30, env={**env, "ZYGOTE_PROBE": "x"})[1] == "x False\n"
    assert zygote.run(code, timeout=30)[1] == "None True\n"


def test_a_timeout_kills_the_probe_and_the_zygote_goes_on(zygote):
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as info:
        zygote.run("import os, time; print(os.getpid(), flush=True); time.sleep(60)", timeout=1)
    assert time.monotonic() - started < 10
    pid = int(info.value.output)
    with pytest.raises(ProcessLookupError):  # killed and reaped
        os.kill(pid, 0)
    assert zygote.run("print('next')", timeout=30) == (0, "next\n", "")


def test_an_idle_zygote_ends_itself_and_starts_again_on_the_next_probe():
    zygote = Zygote(dict(os.environ), REPO, ("json",), idle_s=0.3)
    try:
        assert zygote.run("print(1)", timeout=30) == (0, "1\n", "")
        first = zygote.proc
        first.wait(timeout=10)  # no request for idle_s: it exits by itself, status 0
        assert zygote.idled()
        assert zygote.run("print(2)", timeout=30) == (0, "2\n", "") and zygote.proc is not first
    finally:
        zygote.close()


def test_differs_compares_with_the_environment_after_the_preload(tmp_path):
    (tmp_path / "setter.py").write_text("import os\nos.environ['SET_BY_PRELOAD'] = '1'")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    zygote = _start(env, preload=("setter",))
    try:
        assert zygote.differs({**env, "SET_BY_PRELOAD": "1"}) == set()  # as an import in pytest sets it
        assert zygote.differs(env) == set()  # as the probe's own import would set it
        assert zygote.differs({**env, "SET_BY_PRELOAD": "2"}) == {"SET_BY_PRELOAD"}
        assert zygote.differs({**env, "OTHER": "x"}) == {"OTHER"}
        code = "import os; print(os.environ.get('SET_BY_PRELOAD'), os.environ.get('OTHER'))"
        assert zygote.run(code, timeout=30, env=env)[1] == "1 None\n"
        assert zygote.run(code, timeout=30, env={**env, "SET_BY_PRELOAD": "2", "OTHER": "x"})[1] == "2 x\n"
    finally:
        zygote.close()


def test_a_preload_that_starts_a_thread_is_refused(tmp_path):
    threader = "import threading, time\nthreading.Thread(target=time.sleep, args=[60]).start()"
    (tmp_path / "threader.py").write_text(threader)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    with pytest.raises(ZygoteError, match="preloading threader starts threads"):
        _start(env, preload=("threader",))


def test_close_ends_the_zygote_and_removes_its_files():
    zygote = _start()
    proc, tmp = zygote.proc, zygote.tmp
    zygote.close()
    assert proc.returncode == 0 and not os.path.exists(tmp)


def test_stack_run_falls_back_to_a_subprocess_when_the_zygote_is_gone(contracts, monkeypatch, capfd):
    stack = contracts.Stack("cpu")
    zygote = _start(stack.env())
    monkeypatch.setitem(contracts.ZYGOTES, "cpu", zygote)
    assert stack.run("import sys; print(sys.argv[1:])", "a") == "['a']\n"
    zygote.proc.kill()
    zygote.proc.wait()
    assert stack.run("import sys; print(sys.argv[1:])", "b") == "['b']\n"  # a fresh subprocess
    assert contracts.ZYGOTES["cpu"] is None and "probe zygote unavailable" in capfd.readouterr().err
    with pytest.raises(AssertionError, match=r"\[cpu\] probe failed:\n\s*boom"):
        stack.run("import sys; sys.exit('boom')")


def test_a_failing_probe_fails_in_the_zygote_and_is_not_rerun(contracts, monkeypatch):
    stack = contracts.Stack("cpu")
    zygote = _start(stack.env())
    monkeypatch.setitem(contracts.ZYGOTES, "cpu", zygote)
    monkeypatch.setattr(contracts.subprocess, "run", None)  # a fresh subprocess would fail with a TypeError
    try:
        with pytest.raises(AssertionError, match=r"(?s)\[cpu\] probe failed:\n\s*Traceback .*ZeroDivisionError"):
            stack.run("1 / 0")
        assert contracts.ZYGOTES["cpu"] is zygote and zygote.alive()
    finally:
        zygote.close()


def test_stack_run_forks_unless_the_environment_changed(contracts, monkeypatch):
    stack = contracts.Stack("cpu")
    zygote = _start(stack.env())
    monkeypatch.setitem(contracts.ZYGOTES, "cpu", zygote)
    code = "import os; print(os.getppid(), os.environ['PYTEST_CURRENT_TEST'])"
    try:
        monkeypatch.setenv("PYTEST_CURRENT_TEST", "another test (call)")  # what pytest changes per test
        assert stack.run(code) == f"{zygote.proc.pid} another test (call)\n"
        monkeypatch.setenv("ARISE_ZYGOTE_TEST", "1")  # read at import, maybe: a fresh subprocess
        assert stack.run(code) == f"{os.getpid()} another test (call)\n"
    finally:
        zygote.close()
