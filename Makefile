# Two commands set everything up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# Empty: mnemo's own choice, $MNEMO_CONFIG or else ./config.yaml (`make run CONFIG=x` works too).
CONFIG ?=

# The web console's browser tests (tests/web/) drive Debian's Chromium through Playwright
# (Playwright's own browser download is not used).
CHROMIUM := /usr/bin/chromium
# The webhook-behind-TLS test (tests/ops/test_webhook_tls.py) runs Debian's nginx.
NGINX := /usr/sbin/nginx
# Every dependency at the version of the lock (`make lock` writes it; the Dockerfile uses it too).
LOCK := constraints.txt
UV_VERSION := 0.13.8

.PHONY: run test test-slow test-all lint bench clean chromium nginx lock

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install -q -c $(LOCK) -e ".[postgres,webhooks]"
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install -q -c $(LOCK) -e ".[dev,postgres,webhooks]"
	touch $@ $(VENV)/.installed

# The lock: uv resolves once for every platform and Python >= 3.11 (--universal, where
# pip-compile resolves for the machine it runs on only); pip installs from it as
# constraints, so neither CI nor the image needs uv. Run after changing a dependency.
lock: | $(BIN)/python
	$(BIN)/pip install -q uv==$(UV_VERSION)
	$(BIN)/uv pip compile --universal --python-version 3.11 --extra dev --extra postgres \
		--extra webhooks --extra mcp --custom-compile-command "make lock" pyproject.toml -o $(LOCK)

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

nginx:
	@if [ -x $(NGINX) ]; then :; \
	elif [ "$$(id -u)" = 0 ]; then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y nginx-light; \
	else \
		echo "make: $(NGINX) is missing and this is not root: the webhook TLS test will be" \
		     "SKIPPED; install it with: sudo apt-get install -y nginx-light" >&2; \
	fi

# The suite without the `slow` marks, after the linters: what a change must pass, about
# 5 minutes on 2 idle cores. The slow suites (crash trials, load, outages, subprocesses)
# run with `make test-slow`; CI (.ci/run) runs both. docs/DEVELOPMENT.md has the figures.
# Every wait scales with the load; MNEMO_TEST_TIME_SCALE=N multiplies them by N instead.
test: $(VENV)/.installed-dev chromium nginx
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict memory plugins
	$(BIN)/pytest -q -n auto --maxprocesses 4 -m "not slow"

test-slow: $(VENV)/.installed-dev chromium nginx
	$(BIN)/pytest -q -n auto --maxprocesses 4 -m slow

test-all: test test-slow

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict memory plugins
	$(BIN)/mypy memory bot plugins

bench: $(VENV)/.installed-dev
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) .pytest_cache
