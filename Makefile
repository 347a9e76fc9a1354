# Every target sets up .venv first (idempotent), so a fresh clone needs only `make demo` or `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
WORKDIR ?= runs/demo
PYTEST_ARGS ?=

.PHONY: demo test bench lint setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m icml26zoo.train --config configs/default.py --workdir $(WORKDIR)

test: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadgroup -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(PY) scripts/bench_train.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) runs
