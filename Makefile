# Two commands on a fresh machine: `make demo` runs the scorer on the embedded broker with the
# sample traces; `make test` runs every check CI runs. Both install into .venv first.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install tools demo test bench dashboards

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

# promtool (alert-rule checks and unit tests) and prometheus (the scrape test), from Debian.
tools:
	@command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 || \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus; }

demo: install
	$(BIN)/scorer demo

test: install tools
	$(BIN)/ruff check stream tests bench grafana examples
	$(BIN)/ruff format --check stream tests bench grafana examples
	$(BIN)/mypy stream
	$(BIN)/pytest -q

dashboards: install
	$(BIN)/python grafana/dashboards.py

bench: install
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/threads.py
