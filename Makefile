# The few commands people type. Everything installs itself into .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.dlite-installed

.PHONY: setup assets demo run test test-fast lint clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[dev,train,bench,demo]"
	touch $(STAMP)

assets: setup
	$(VENV)/bin/dlite-hf assets fetch smollm2-135m

demo: assets
	$(PY) app.py

run: assets
	$(VENV)/bin/dlite-hf compare

test: assets
	$(PY) -m pytest -q

# the unit tests that need no downloaded model (tiny seeded models built in code); CI runs them within `make test`
test-fast: setup
	$(PY) -m pytest -q -m "not real and not slow and not heavy"

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build dist src/*.egg-info
