#!/usr/bin/env bash
# Builds what a bare GPU machine without a package registry (the workplace's lent H200: Python 3.12,
# torch 2.11+cu130, no vLLM/verl/Ray) needs to run run_scripts/gpu_check.sh with the tiny Qwen3:
# the users' resolved GPU stack (scripts/gpu_stack.py resolve) minus the image's packages
# (device_packages.txt) and skip.txt, as py3.12 wheels installed into site312/, trimmed, gzipped and
# split into chunks that each fit one call's 64 MiB with the working tree; plus the tiny assets.
# usage (repo root): bash dev/gpu_device/prepare.sh   -> .gpuc/p0..pN, .gpuc/run/
# Then see dev/gpu_device/README.md for the calls.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/dev/gpu_device
PY=${PYTHON:-$ROOT/.venv/bin/python}
W=${WORK:-/tmp/gpu_device}
mkdir -p "$W/whl" "$ROOT/.gpuc/run"
grep -qx "/.gpuc/" "$ROOT/.git/info/exclude" 2>/dev/null || echo "/.gpuc/" >>"$ROOT/.git/info/exclude"
norm() { tr 'A-Z_.' 'a-z--'; }
"$PY" "$ROOT/scripts/gpu_stack.py" resolve >"$W/resolved.txt"
# carried on top of the image for the users' pins: transformers 5.9 needs tokenizers < 0.23;
# Ray's and OpenTelemetry's generated code needs protobuf 7 and a matching grpcio
KEEP="transformers tokenizers protobuf grpcio"
sed 's/#.*//;/^$/d' "$HERE/skip.txt" | norm | sort -u >"$W/skip"
norm <"$HERE/device_packages.txt" | sort -u >"$W/have"
while IFS= read -r line; do
  name=${line%%==*}
  n=$(echo "$name" | norm)
  case " $KEEP " in *" $n "*) echo "$line"; continue ;; esac
  grep -qx "$n" "$W/skip" "$W/have" || echo "$line"
done <"$W/resolved.txt" >"$W/carry.txt"
echo "[prepare] $(wc -l <"$W/carry.txt") distributions to carry"
PLAT=()
for p in 2_34 2_31 2_28 2_27 2_26 2_24 2_17 2_12 2_5; do PLAT+=(--platform "manylinux_${p}_x86_64"); done
PLAT+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
grep -v '^antlr4-python3-runtime==' "$W/carry.txt" >"$W/binary.txt"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLAT[@]}" -d "$W/whl" -r "$W/binary.txt"
# antlr4 4.9.3 (hydra's) is an sdist only: a pure-python wheel built here
if a=$(grep '^antlr4-python3-runtime==' "$W/carry.txt"); then python3 -m pip wheel -q --no-deps "$a" -w "$W/whl"; fi
rm -rf "$W/site312"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$W/site312" --python-version 3.12 \
  --implementation cp --only-binary=:all: "${PLAT[@]}" "$W"/whl/*.whl
# the project's entry points (its vLLM plugin names the weight-sync socket and the shared memory after
# the launch); the device runs the working tree from PYTHONPATH, without a pip install
d="$W/site312/arise_verl-0.1.0.dist-info" && mkdir -p "$d"
printf 'Metadata-Version: 2.4\nName: arise-verl\nVersion: 0.1.0\n' >"$d/METADATA"
"$PY" - "$ROOT/pyproject.toml" >"$d/entry_points.txt" <<'PYEOF'
import sys, tomllib
for group, points in tomllib.load(open(sys.argv[1], "rb"))["project"]["entry-points"].items():
    print(f"[{group}]", *(f"{k} = {v}" for k, v in points.items()), "", sep="\n")
PYEOF
# not loaded by a dense model's launch: vLLM's MoE kernels (import guarded), its Rust frontend,
# xgrammar's static library, Ray's Java jar, source maps
(cd "$W/site312" && rm -f vllm/_moe_C_stable_libtorch.abi3.so vllm/vllm-rs xgrammar/lib/libxgrammar.a \
  ray/jars/ray_dist.jar ray/dashboard/client/build/static/js/*.map)
find "$W/site312" -name __pycache__ -prune -exec rm -rf {} +
(cd "$W" && tar -cf - site312 | gzip -6 >"$W/site312.tar.gz")
rm -f "$ROOT"/.gpuc/p[0-9]*
# 59 MiB a chunk: with the working tree (~3 MB) under one call's 64 MiB
(cd "$ROOT/.gpuc" && split -b 59M -d -a 1 "$W/site312.tar.gz" p)
TINY=$("$PY" -m recipe.arise.cpu.tiny --cached | tail -n 1)
rm -rf "$ROOT/.gpuc/run/tiny" && cp -r "$TINY" "$ROOT/.gpuc/run/tiny"
cp "$HERE/gpu_run.sh" "$HERE/env.sh" "$ROOT/.gpuc/run/"
ls -la "$ROOT/.gpuc"
