#!/usr/bin/env bash
# Wheels that `trajkit train`, bench/grpo_gpu.py and bench/tool_learning.py need on the GPU image but that it lacks
# (the image has torch, transformers 5.17, accelerate, pyarrow, numpy, pandas, xxhash, fsspec, huggingface-hub,
# typer, rich, pyyaml, httpx, httpcore, h11, click, attrs, idna, certifi): TRL, datasets and their missing needs,
# pydantic for trajkit's configs, duckdb for the run's SQL views (eval passk); for the tool-learning bench the MCP
# SDK and what it imports (the example servers and trajkit's client: jsonschema, starlette, uvicorn,
# cryptography, ...; anyio pinned, the image's may be older), gguf (the real model's weights) and bfcl-eval (BFCL's
# data and checker, installed without its needs as in the Makefile). Pure-Python wheels where they exist; binary
# ones for CPython 3.12 on x86-64. The versions are the ones this checkout's .venv runs, so CPU tests and GPU runs
# use the same code.
#
#   make gpu-bundle                      # -> .whl/*.whl (git-ignored), size checked against the carry limit
#   GPU_BUNDLE_EXTRA="pyarrow==26.0.1" make gpu-bundle   # more pins, e.g. when the image's pyarrow is < 24
#                                                        # (datasets 5.2 needs pyarrow >= 24)
#   # then, on the device:  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
#   #     --upgrade --target /tmp/gpu/site-packages .whl/*.whl && export PYTHONPATH=/tmp/gpu/site-packages:$PWD
#   # (the folder must be named site-packages: dill, which `datasets` fingerprints with, pickles modules
#   # found elsewhere by value, and Dataset.from_list then fails on pyarrow's MonthDayNano type)
#
#   GPU_BUNDLE_SITE=1 make gpu-bundle    # also .whl/a/site.tar.xz.aa and .whl/b/site.tar.xz.ab: the wheels installed
#                                        # here for CPython 3.12 into one site-packages folder, xz-compressed
#                                        # (about 23 MiB instead of the wheels' 37) and cut in two, to ride along the
#                                        # two calls that bring the real model's GGUF (scripts/gpu_relay.sh);
#                                        # bench/tool_learning.py's docstring has the device side
# MCP servers run as processes of their own, which do not inherit PYTHONPATH: for them the folder must be on the
# interpreter's own path (a .pth file in its site-packages, as bench/tool_learning.py's commands write).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${GPU_BUNDLE_DIR:-.whl}
CARRY_LIMIT_MIB=64                        # the device tool's limit: working tree + carried paths
VENV_PY=${VENV_PY:-.venv/bin/python}
PACKAGES=(trl datasets dill multiprocess pydantic pydantic-core annotated-types typing-inspection typing-extensions duckdb
  mcp mcp-types httpx2 anyio jsonschema jsonschema-specifications referencing rpds-py opentelemetry-api pyjwt
  cryptography cffi python-multipart sse-starlette starlette uvicorn gguf bfcl-eval)
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64)

pins=$("$VENV_PY" - "${PACKAGES[@]}" <<'PY'
import importlib.metadata as m, sys
missing = []
for name in sys.argv[1:]:
    try:
        m.version(name)
    except m.PackageNotFoundError:
        missing.append(name)
if missing:  # gguf arrives with the real-weights issue; pip install it into .venv first
    sys.exit(f"gpu-bundle: not installed in .venv: {' '.join(missing)}")
print(" ".join(f"{name}=={m.version(name)}" for name in sys.argv[1:]))
PY
)
pins="$pins ${GPU_BUNDLE_EXTRA:-}"
extra_count=$(echo "${GPU_BUNDLE_EXTRA:-}" | wc -w)
if ! git check-ignore -q "$OUT" 2>/dev/null; then  # wheels travel as a carried path, never as tracked files
  exclude=$(git rev-parse --git-path info/exclude) && mkdir -p "$(dirname "$exclude")" && echo "/$OUT/" >> "$exclude"
fi
rm -rf "$OUT" && mkdir -p "$OUT"
# shellcheck disable=SC2086
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d "$OUT" $pins

count=$(ls "$OUT"/*.whl | wc -l)
if [ "$count" -ne $((${#PACKAGES[@]} + extra_count)) ]; then
  echo "gpu-bundle: expected $((${#PACKAGES[@]} + extra_count)) wheels, got $count" >&2; exit 1
fi
wheels=$(du -cb "$OUT"/*.whl | tail -1 | cut -f1)
tree=$(git ls-files -co --exclude-standard -z | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
total=$((wheels + tree))
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
echo "gpu-bundle: $count wheels in $OUT ($(mib "$wheels")); working tree $(mib "$tree"); carried together $(mib "$total")"
echo "  $pins"
if [ "$total" -ge $((CARRY_LIMIT_MIB * 1048576)) ]; then
  echo "gpu-bundle: over the ${CARRY_LIMIT_MIB} MiB carry limit" >&2; exit 1
fi

if [ "${GPU_BUNDLE_SITE:-0}" = 1 ]; then
  site=$(mktemp -d)
  trap 'rm -rf "$site"' EXIT
  python3 -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 --implementation cp \
    "${PLATFORMS[@]}" --target "$site/site-packages" "$OUT"/*.whl
  tar -C "$site/site-packages" -cf - . | xz -9 -T0 > "$site/site.tar.xz"
  size=$(stat -c %s "$site/site.tar.xz")
  mkdir -p "$OUT/a" "$OUT/b"
  split -n 2 -d -a 1 "$site/site.tar.xz" "$site/part."
  mv "$site/part.0" "$OUT/a/site.tar.xz.aa" && mv "$site/part.1" "$OUT/b/site.tar.xz.ab"
  echo "gpu-bundle: site-packages for CPython 3.12 as $OUT/a/site.tar.xz.aa + $OUT/b/site.tar.xz.ab ($(mib "$size") in all);"
  echo "  sha256 $(sha256sum "$site/site.tar.xz" | cut -d' ' -f1)"
  for part in a b; do
    relay=0
    [ -d ".relay/$part" ] && relay=$(du -cb ".relay/$part" | tail -1 | cut -f1)
    call=$(( $(du -cb "$OUT/$part" | tail -1 | cut -f1) + relay + tree ))
    echo "  call with .relay/$part + $OUT/$part + the working tree: $(mib "$call") (limit ${CARRY_LIMIT_MIB} MiB)"
    if [ "$call" -ge $((CARRY_LIMIT_MIB * 1048576)) ]; then echo "gpu-bundle: call $part over the limit" >&2; exit 1; fi
  done
fi
