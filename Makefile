# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Empty: mnemo's own choice, $MNEMO_CONFIG or else ./config.yaml (`make run CONFIG=x` works too).
CONFIG ?=

# The web console's browser tests (tests/web/) drive Debian's Chromium through Playwright
# (Playwright's own browser download is not used).
CHROMIUM := /usr/bin/chromium

.PHONY: run test test-fast lint bench clean chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[postgres,webhooks]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e ".[dev,postgres,webhooks]"
	touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/mnemo $(if $(CONFIG),--config $(CONFIG)) run

# Installed as root (CI, a fresh container); otherwise said, and the browser tests skip
# saying why.
chromium:
	@if [ -x $(CHROMIUM) ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	else \
		echo "make: $(CHROMIUM) is missing and this is not root: the web console's browser" \
		     "tests will be SKIPPED; install it with: sudo apt-get install -y chromium" >&2; \
	fi

test: $(VENV)/.installed-dev chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict memory
	$(BIN)/pytest -q -n auto --maxprocesses 4

# The inner loop: the suite without the `slow` marks, 2 to 3 minutes on 2 idle cores (README).
# Every wait scales with the load; MNEMO_TEST_TIME_SCALE=N multiplies them by N instead.
test-fast: $(VENV)/.installed-dev chromium
	$(BIN)/pytest -q -n auto --maxprocesses 4 -m "not slow"

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict memory
	$(BIN)/mypy memory bot plugins

bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache
