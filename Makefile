# trainperf — run `make help` for the targets.
# Setup is automatic: every target that needs the environment builds .venv first,
# and reinstalls only when requirements.txt or pyproject.toml changed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.trainperf-installed
KERNEL := trainperf
JOBS   ?= 2

.DEFAULT_GOAL := help
.PHONY: help setup report test test-fast lab bench clean

help: ## list the targets
	@awk 'BEGIN{FS=":.*## "} /^[a-z-]+:.*## /{printf "  make %-10s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m ipykernel install --sys-prefix --name $(KERNEL) --display-name "trainperf (.venv)" >/dev/null
	touch $(STAMP)

setup: $(STAMP) ## create .venv, install pinned requirements, register the Jupyter kernel

report: $(STAMP) ## build every HTML report from the embedded data into reports/
	$(PY) -m trainperf report --jobs $(JOBS)

test: $(STAMP) ## run the whole test suite (slow multi-process tests included; installs Chromium if missing)
	$(PY) tests/browser.py
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -n $(JOBS) -q

test-fast: $(STAMP) ## run the tests, skipping the slow multi-process ones
	$(VENV)/bin/lint-imports --no-cache
	$(PY) -m pytest -n $(JOBS) -q -m "not slow"

lab: $(STAMP) ## open JupyterLab on notebooks/ (prints its URL; extra flags: make lab ARGS="--port 9000")
	$(PY) -m trainperf.report.build.lab $(ARGS)

bench: $(STAMP) ## measure the default sweeps on this machine into data/runs/
	$(PY) -m trainperf bench

clean: ## remove generated reports and caches (keeps .venv)
	rm -rf reports .pytest_cache .hypothesis
	find . -name __pycache__ -type d -not -path "./$(VENV)/*" -prune -exec rm -rf {} +
