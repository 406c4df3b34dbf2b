# mqstore: `make book` builds the HTML book, `make test` runs every test.
# Both create .venv and install requirements.txt (again only when it or
# pyproject.toml changed).
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
STAMP := $(VENV)/.installed
QUIET := grep -v -e "is ignored: it is neither a file nor a directory" || true

.PHONY: install kernels export outputs html html-stored book test test-reference test-fast bench clean

$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	@set -o pipefail; $(PY) -m pip install -q -r requirements.txt 2>&1 | { $(QUIET); }
	@touch $(STAMP)

install: $(STAMP)

# chapters -> mqstore/*.py
export: install
	$(PY) tools/export.py

# re-execute every chapter and store its outputs (what nbval compares)
outputs: export kernels
	$(VENV)/bin/jupyter execute --inplace book/*.ipynb

# compile chapter 10's kernels once (or load numba's cache), before anything times out waiting for them
kernels: install
	$(PY) -c "from mqstore import accel; print(f'kernels ready in {accel.warm():.1f} s')"

# build the HTML book, executing every chapter; warnings and failing cells fail it
html: install kernels
	$(VENV)/bin/jupyter-book build . --all -W --keep-going
	@echo "The book is in _build/html/book/intro.html"

book: export html

# the HTML from the stored outputs, for make test: nbval checks every chapter's stored outputs against a
# fresh run, with and without the fast paths, so the test build renders those (intro.md still executes)
html-stored: install
	@mkdir -p _build
	sed -e 's#^  execute_notebooks: force#  execute_notebooks: force\n  exclude_patterns: ["*.ipynb"]#' \
	    -e 's#: tools/$$#: ../tools/#' _config.yml > _build/_config_stored.yml
	$(VENV)/bin/jupyter-book build . --all -W --keep-going --config _build/_config_stored.yml

# the whole suite twice: with the fast paths (chapter 10), then the reference engine alone; tests
# marked `once` (the built HTML in a browser, a clone's first run) do not depend on MQSTORE_ACCEL and
# run in the first pass only
test: install
	$(MAKE) html-stored
	$(MAKE) kernels
	$(PY) -m pytest
	MQSTORE_ACCEL=0 $(PY) -m pytest -m "not once"

test-reference: install
	MQSTORE_ACCEL=0 $(PY) -m pytest

test-fast: install
	$(PY) -m pytest -m "not slow and not browser" -x

bench: install
	@mkdir -p benchmarks/results
	@rm -f benchmarks/results/latest.csv
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done
	@echo "The rows are in benchmarks/results/latest.csv"

clean:
	rm -rf _build .pytest_cache .hypothesis benchmarks/results/*.csv
	find . -name __pycache__ -not -path "./$(VENV)/*" -prune -exec rm -rf {} +
