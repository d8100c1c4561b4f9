# Two commands on a fresh machine: `make demo` runs the scorer on the embedded broker with the
# sample traces; `make test` runs every check CI runs. Both install into .venv first.
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install demo test bench

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/scorer demo

test: install
	$(BIN)/ruff check stream tests bench
	$(BIN)/ruff format --check stream tests bench
	$(BIN)/mypy stream
	$(BIN)/pytest -q

bench: install
	$(BIN)/python bench/throughput.py
	$(BIN)/python bench/threads.py
