# tracekit: `make demo` and `make test` work on a fresh machine with only python3.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# No GPU here? Test the CUDA target on numba's simulator.
export NUMBA_ENABLE_CUDASIM ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 && echo 0 || echo 1)
ACCEPTANCE := $(wildcard ../shared/acceptance)

.PHONY: setup sysdeps demo test lint pytest acceptance bench lab course fuzz clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev,cuda,dask]"
	touch $(STAMP)

# The fast-math library's machine code, compiled once per machine like an extension module
# (tracekit/backends/fastmath.py: precompile); a new process loads it instead of compiling it.
FASTMATH := tracekit/backends/fastmath_cache/.made
$(FASTMATH): $(STAMP) tracekit/backends/fastmath.py
	$(BIN)/python -c "from tracekit.backends import fastmath; fastmath.precompile()"
	touch $@

# The parallel driver of every chunk kernel, likewise (tracekit/backends/drivers.py: precompile).
DRIVE := tracekit/backends/drive_cache/.made
$(DRIVE): $(STAMP) $(wildcard tracekit/backends/*.py)
	$(BIN)/python -c "from tracekit.backends import drivers; drivers.precompile()"
	touch $@

setup: $(STAMP) $(FASTMATH) $(DRIVE)

# Debian's graphviz (the system `dot`) and chromium (the browser test), when we may install them.
sysdeps:
	@if command -v dot >/dev/null 2>&1 && [ -x /usr/bin/chromium ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  (apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q graphviz chromium) >/dev/null \
	  || echo "note: could not install graphviz/chromium; their tests will be skipped"; \
	else echo "note: not root: install graphviz and chromium to run the system-dot and browser tests"; fi

demo: setup
	$(BIN)/python notebooks/demo.py

lint: setup
	$(BIN)/ruff check tracekit tests benchmarks
	$(BIN)/ruff format --check tracekit tests benchmarks

pytest: setup sysdeps
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 tests

acceptance: setup sysdeps
	@if [ -n "$(ACCEPTANCE)" ]; then TRACEKIT_JIT_WAIT=1 $(BIN)/python -m pytest $(ACCEPTANCE) -q -p no:cacheprovider; \
	else echo "no ../shared/acceptance here; skipped"; fi

test: lint pytest acceptance

bench: setup
	$(BIN)/python benchmarks/run.py

# Differential fuzzing for as long as asked (FUZZ_SECONDS=600 make fuzz; FUZZ_SEED=N to repeat a
# run); shrunk failures land in tests/fuzz/regressions/, which `make test` replays.
FUZZ_SECONDS ?= 300
fuzz: setup
	$(BIN)/python tests/fuzz/fuzzgen.py --seconds $(FUZZ_SECONDS) $(if $(FUZZ_SEED),--seed $(FUZZ_SEED))

# The course: JupyterLab rooted at notebooks/ (jupyter refuses to start as root without --allow-root).
lab: setup
	$(BIN)/jupyter lab notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# The course published (docs/course/): every notebook executed, its outputs kept, for reading
# without running it; `make test` checks the copy against the notebooks (run this after editing one).
course: setup sysdeps
	$(BIN)/python notebooks/publish.py

clean:
	rm -rf $(VENV) build dist *.egg-info demo.svg
