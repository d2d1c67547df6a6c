#!/usr/bin/env bash
# Wheels that `trajkit train` and bench/grpo_gpu.py need on the GPU image but that it lacks
# (the image has torch, transformers 5.17, accelerate, pyarrow, numpy, pandas, xxhash, fsspec,
# huggingface-hub, typer, rich, pyyaml): TRL, datasets and their missing needs, plus pydantic for
# trajkit's configs, duckdb for the run's SQL views (eval passk) and gguf for real weights from a GGUF
# (transformers' GGUF loader; the file itself travels with scripts/gpu_relay.sh). Pure-Python wheels where they exist;
# binary ones for CPython 3.12 on x86-64.
# The versions are the ones this checkout's .venv runs, so CPU tests and GPU runs use the same code.
#
#   make gpu-bundle                      # -> .whl/ (git-ignored), size checked against the carry limit
#   GPU_BUNDLE_EXTRA="pyarrow==26.0.1" make gpu-bundle   # more pins, e.g. when the image's pyarrow is < 24
#                                                        # (datasets 5.2 needs pyarrow >= 24)
#   # then, on the device:  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
#   #     --upgrade --target /tmp/gpu/site-packages .whl/*.whl && export PYTHONPATH=/tmp/gpu/site-packages:$PWD
#   # (the folder must be named site-packages: dill, which `datasets` fingerprints with, pickles modules
#   # found elsewhere by value, and Dataset.from_list then fails on pyarrow's MonthDayNano type)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${GPU_BUNDLE_DIR:-.whl}
CARRY_LIMIT_MIB=64                        # the device tool's limit: working tree + carried paths
VENV_PY=${VENV_PY:-.venv/bin/python}
PACKAGES=(trl datasets dill multiprocess pydantic pydantic-core annotated-types typing-inspection typing-extensions duckdb gguf)

pins=$("$VENV_PY" - "${PACKAGES[@]}" <<'PY'
import importlib.metadata as m, sys
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
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$OUT" $pins

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
