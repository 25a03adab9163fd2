#!/usr/bin/env bash
# GPU install (the paper's setup): a virtualenv with verl 0.9.1's own vLLM pins (verl[vllm]:
# torch 2.11, vllm 0.24, transformers 5.9), transferqueue and this project (editable, with the
# report's matplotlib) and the text environments: `pip install -e ".[gpu,envs]"` (pyproject.toml).
#
# usage: scripts/install_gpu.sh [VENV]            install (default VENV: .venv)
#        scripts/install_gpu.sh --dry-run [VENV]  install nothing; print what PyPI resolves for that
#                                                 install, name==version one a line (sorted); exit 1
#                                                 on a resolver conflict. Cached per requirement set
#                                                 (scripts/gpu_stack.py; --refresh resolves again).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DRY_RUN=0
REFRESH=()
VENV=.venv
for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY_RUN=1 ;;
        --refresh) REFRESH=(--refresh) ;;
        -h | --help) sed -n '2,10p' "$0"; exit 0 ;;
        -*) echo "install_gpu.sh: unknown option $arg" >&2; exit 2 ;;
        *) VENV=$arg ;;
    esac
done

if [ "$DRY_RUN" = 1 ]; then
    # the resolution depends on the Python version: take the venv's when it exists
    PY=python3
    if [ -x "$VENV/bin/python" ]; then PY="$VENV/bin/python"; fi
    if ! "$PY" "$ROOT/scripts/gpu_stack.py" resolve "${REFRESH[@]}"; then
        echo "install_gpu.sh: the GPU stack does not resolve (see pip's message above)" >&2
        exit 1
    fi
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip
$PIP install -e "$ROOT[gpu,envs]"
"$VENV/bin/python" -c "import matplotlib, torch, verl, vllm, recipe.arise; print('installed: torch', torch.__version__, 'verl', verl.__version__, 'vllm', vllm.__version__, 'CUDA', torch.cuda.is_available())"
"$VENV/bin/python" -m recipe.arise.tools.preflight_env || echo "install_gpu.sh: the text environments need Java: apt-get install -y default-jre-headless" >&2
