# `make run` and `make test` install what they need into .venv on first use.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-$(shell sha1sum pyproject.toml | cut -c1-12)

CHROMIUM := /usr/bin/chromium
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip==25.3
	$(VENV)/bin/pip install --quiet -e '.[dev]'
	touch $@

run: $(STAMP)
	$(VENV)/bin/toplist run

# The browser test drives Debian's Chromium with Playwright (no browser download).
$(CHROMIUM):
	@echo "installing Debian's chromium for the web page test"
	$(SUDO) apt-get install -y chromium \
	  || ($(SUDO) apt-get update && $(SUDO) apt-get install -y chromium)

# The alert rules are checked with promtool (Debian's prometheus package).
PROMTOOL := /usr/bin/promtool
$(PROMTOOL):
	@echo "installing Debian's prometheus for promtool (the alert rules test)"
	$(SUDO) apt-get install -y --no-install-recommends prometheus \
	  || ($(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends prometheus)

# The compose-file tests validate docker/compose*.yml with `docker compose config`; where the
# docker client lacks its compose plugin, docker/ensure-compose.sh builds it once with Go.
test: $(STAMP) $(CHROMIUM) $(PROMTOOL)
	$(VENV)/bin/ruff check .
	bash docker/ensure-compose.sh
	$(VENV)/bin/pytest

# Benchmarks (bench/README.md): wrk and nginx from Debian, py-spy into .venv.
bench: $(STAMP)
	@command -v wrk >/dev/null && command -v nginx >/dev/null \
	  || $(SUDO) apt-get install -y wrk nginx-light \
	  || ($(SUDO) apt-get update && $(SUDO) apt-get install -y wrk nginx-light)
	$(VENV)/bin/pip install --quiet -e '.[dev,bench]'
	$(VENV)/bin/python -m bench $(BENCH_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

clean:
	rm -rf $(VENV) .toplist target logs test-artifacts
