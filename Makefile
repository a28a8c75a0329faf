# Two commands do everything on a fresh machine (they create .venv and install first):
#   make run    compile and run the built-in demo
#   make test   the whole test suite (ruff + lit + pytest)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.spmdc-installed
# pytest workers (pytest-xdist; each test file's tests stay in one worker: its module fixtures built once)
JOBS   ?= 2
PYTEST := $(BIN)/python -m pytest -q -n $(JOBS) --dist loadfile --durations=15 tests/unit

.PHONY: install run test lint lit unit bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/spmdc run

test: $(STAMP)
	$(BIN)/ruff check spmdc tests bench
	$(BIN)/lit -sv tests/lit
	$(PYTEST)

lint: $(STAMP)
	$(BIN)/ruff check spmdc tests bench

lit: $(STAMP)
	$(BIN)/lit -sv tests/lit

unit: $(STAMP)
	$(PYTEST)

bench: $(STAMP)
	$(BIN)/python bench/ir_scale.py

clean:
	rm -rf $(VENV) build *.egg-info
