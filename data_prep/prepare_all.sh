#!/usr/bin/env bash
# Build every parquet the ARISE run scripts expect.
#
#   bash data_prep/prepare_all.sh                       # from the HF hub (needs `datasets` + network)
#   bash data_prep/prepare_all.sh --local ../shared/data/raw   # from local raw files (offline)
#   bash data_prep/prepare_all.sh --tool python         # tool-use prompts (DATA_DIR default: ~/data/arise_tool)
#
# Output (DATA_DIR defaults to $HOME/data/arise, with --tool $HOME/data/arise_tool):
#   $DATA_DIR/train/deepscaler.parquet
#   $DATA_DIR/eval/{aime24,aime25,amc23,math500,omni_math}.parquet
#   $DATA_DIR/eval/omni_math_{algebra,number_theory,combinatorics,geometry}.parquet
# Env: DATA_DIR, PYTHON (default: python3), ON_BAD (skip|error, default skip).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DATA_DIR="${DATA_DIR:-}"
PYTHON="${PYTHON:-python3}"
ON_BAD="${ON_BAD:-skip}"
LOCAL=""
TOOL=""

while [[ $# -gt 0 ]]; do
  case "$1" in
    --local) LOCAL="$2"; shift 2 ;;
    --local=*) LOCAL="${1#--local=}"; shift ;;
    --out|--data-dir) DATA_DIR="$2"; shift 2 ;;
    --tool) TOOL="$2"; shift 2 ;;
    --tool=*) TOOL="${1#--tool=}"; shift ;;
    -h|--help) sed -n '2,11p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

# tool-use data has its own default folder: the plain run scripts must never read it by accident
DATA_DIR="${DATA_DIR:-$HOME/data/arise${TOOL:+_tool}}"
mkdir -p "$DATA_DIR/train" "$DATA_DIR/eval"
DATA_DIR="$(cd "$DATA_DIR" && pwd)"
if [[ -n "$LOCAL" ]]; then RAW="$(cd "$LOCAL" && pwd)"; fi  # resolve before leaving the caller's cwd
cd "$REPO_ROOT"

run() {  # run <module> <outdir> [local-path] [extra args...]
  local mod="$1" out="$2" src="${3:-}"; shift 3 || shift $#
  local args=(--out "$out" --on-bad "$ON_BAD")
  if [[ -n "$src" ]]; then args+=(--local "$src"); fi
  if [[ -n "$TOOL" ]]; then args+=(--tool "$TOOL"); fi
  echo "==> python -m recipe.arise.data_prep.$mod ${args[*]} $*"
  "$PYTHON" -m "recipe.arise.data_prep.$mod" "${args[@]}" "$@"
}

first_existing() {  # print the first existing path among the arguments
  for p in "$@"; do if [[ -e "$p" ]]; then echo "$p"; return 0; fi; done
  return 1
}

if [[ -n "$LOCAL" ]]; then
  # Full DeepScaleR json if someone drops it in, else the (incomplete) components folder.
  DS_SRC="$(first_existing "$RAW/deepscaler/train/deepscaler.json" "$RAW/deepscaler/deepscaler.json" \
                           "$RAW/deepscaler/train_components")"
  OMNI_SRC="$(first_existing "$RAW/omni_math/Omni-Math.jsonl" "$RAW/omni_math/test.jsonl" \
                             "$RAW/omni_math_rule/omni_math_rule.jsonl")"
  run deepscaler "$DATA_DIR/train" "$DS_SRC"
  run aime24     "$DATA_DIR/eval"  "$(first_existing "$RAW/aime24_qwen25math/test.jsonl" "$RAW/deepscaler/test/aime.json")"
  run aime25     "$DATA_DIR/eval"  "$(first_existing "$RAW/aime25/test.jsonl" "$RAW/aime25_deepscaler_format/aime-2025.json")"
  run amc23      "$DATA_DIR/eval"  "$(first_existing "$RAW/amc23_qwen25math/test.jsonl" "$RAW/deepscaler/test/amc.json")"
  run omni_math  "$DATA_DIR/eval"  "$OMNI_SRC"
  run math500    "$DATA_DIR/eval"  "$(first_existing "$RAW/math500/test.jsonl" "$RAW/deepscaler/test/math.json")"
else
  for mod in deepscaler; do run "$mod" "$DATA_DIR/train" ""; done
  for mod in aime24 aime25 amc23 omni_math math500; do run "$mod" "$DATA_DIR/eval" ""; done
fi

echo
echo "==> wrote (rows):"
"$PYTHON" - "$DATA_DIR" <<'PY'
import sys
from pathlib import Path
import pyarrow.parquet as pq
root = Path(sys.argv[1])
for p in sorted(root.glob("*/*.parquet")):
    print(f"  {pq.ParquetFile(p).metadata.num_rows:>7}  {p}")
PY
