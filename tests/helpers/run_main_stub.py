"""run_scripts/common.sh's ``run_main`` with a stand-in for the trainer (importable as
``run_main_stub``; tests/conftest.py puts this folder on the path): the stub answers common.sh's
``python -c 'import flash_attn'`` probe with a failure, runs the real start-up path
(``-m recipe.arise.tools.launch``) with this interpreter, and otherwise runs the test's ``body``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_main(tmp_path: Path, body: str, **env: str) -> subprocess.CompletedProcess:
    """``run_main recipe.fake.entry a=1`` with ``$PYTHON`` a bash stub running ``body`` for the
    trainer, ``env`` on top of a minimal environment (``LOG_FILE``, the stub's own variables)."""
    stub = tmp_path / "python"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        "[ \"$1\" = -c ] && exit 1  # common.sh probes `python -c 'import flash_attn'`\n"
        f'[ "$1 $2" = "-m recipe.arise.tools.launch" ] && exec {sys.executable} "$@"  # the real start-up path\n' + body
    )
    stub.chmod(0o755)
    script = f'set -euo pipefail; source "{REPO}/run_scripts/common.sh"; run_main recipe.fake.entry a=1'
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "MODEL_PATH": "org/Model",
        "PYTHON": str(stub),
        "ATTN": "sdpa",
        "SKIP_PREFLIGHT": "1",
        "CKPT_DIR": str(tmp_path / "ckpt"),
    }
    return subprocess.run(
        ["bash", "-c", script], cwd=REPO, env={**base, **env}, capture_output=True, text=True, timeout=180
    )
