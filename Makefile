# shardsmith: `make demo` runs the whole job on a generated example, `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   ?= build/demo

.PHONY: install test demo lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## .venv with shardsmith (editable) and the test tools

test: $(STAMP)  ## run the test suite
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check shardsmith scripts tests

demo: $(STAMP)  ## generate a small image tree, pack it, print the summary
	$(BIN)/python scripts/make_sample_tree.py $(DEMO)/source --count 40 --width 2400 --height 1800 --bad 3 --seed 1
	$(BIN)/shardsmith pack --config configs/demo.yaml

bench: $(STAMP)
	$(BIN)/python scripts/bench_pack.py

clean:
	rm -rf build $(VENV)
