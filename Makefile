# Every target sets up .venv first (idempotent), so a fresh clone needs only `make demo` or `make test`.
# pip byte-compiles what it installs (about 10 CPU-s of a fresh setup), and that pays: where PYTHONDONTWRITEBYTECODE
# is set (this project's machines) Python never writes a .pyc itself, so without them every worker and every
# subprocess a test starts would compile JAX and the rest from source (measured: the suite 5% slower).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The exact tested set of every dependency (top-level and transitive); `make lock` refreshes it.
LOCK := constraints.txt
WORKDIR ?= runs/demo
PYTEST_ARGS ?=

.PHONY: demo test notebooks bench lint setup lock clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py $(LOCK)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c $(LOCK) -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m icml26zoo.train --config default --workdir $(WORKDIR)

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadscope -q $(PYTEST_ARGS)

# Every notebook top to bottom at its QUICK budget (a few minutes each), as a Colab user runs it. make test runs
# them at SMOKE (an experiment's notebook inside its contract test, tests/repro/test_experiments.py).
notebooks: $(STAMP)
	ZOO_NOTEBOOK_BUDGET=quick $(PY) -m pytest -n 2 -q tests/test_notebooks.py -k runs_outside $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) scripts/bench_train.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

# Resolves the newest versions pyproject.toml allows in a scratch venv and pins them all in $(LOCK). The
# constraints bind `make` only, not `pip install icml26-zoo`. Run `make test` on the new lock before committing it.
lock:
	tmp=$$(mktemp -d) && \
	$(PYTHON) -m venv $$tmp/venv && \
	$$tmp/venv/bin/python -m pip install --quiet --upgrade pip && \
	$$tmp/venv/bin/python -m pip install --quiet -e ".[test]" && \
	{ echo "# The tested environment, pinned: make installs with -c $(LOCK); refresh with make lock."; \
	  $$tmp/venv/bin/python -m pip freeze --all --exclude-editable | grep -v -e '^pip==' -e '^#'; } > $(LOCK) && \
	rm -rf $$tmp

clean:
	rm -rf $(VENV) runs
