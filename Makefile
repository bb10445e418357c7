# shardsmith: `make demo` runs the whole job on a generated example, `make test` runs the tests.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   ?= build/demo
CONFIG ?= configs/demo.yaml

REPORT ?= build/reports/$(notdir $(basename $(CONFIG)))-$(shell date +%Y%m%d-%H%M%S).json

.PHONY: install test demo lint bench stage nightly retrain-data clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# The CPU build of torch first: an unpinned install would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)  ## .venv with shardsmith (editable) and the test tools

test: $(STAMP)  ## run the test suite
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check shardsmith scripts tests

demo: $(STAMP)  ## generate a small image tree, pack, stage, verify, print the summaries
	$(BIN)/python scripts/make_sample_tree.py $(DEMO)/source --count 40 --width 2400 --height 1800 --bad 3 --seed 1
	$(BIN)/shardsmith pack --config configs/demo.yaml
	$(BIN)/shardsmith stage --config configs/demo.yaml
	$(BIN)/shardsmith verify $(DEMO)/staged --decode

stage: $(STAMP)  ## copy the dataset of CONFIG to its stage.to directory, verified
	$(BIN)/shardsmith stage --config $(CONFIG)

nightly: $(STAMP)  ## for cron: pack CONFIG (a no-op when nothing changed), verify, JSON report
	@mkdir -p $(dir $(REPORT))
	$(BIN)/shardsmith pack --config $(CONFIG) --quiet --report $(REPORT)
	$(BIN)/shardsmith verify --config $(CONFIG) --quiet

retrain-data: $(STAMP)  ## before a retrain: pack CONFIG if needed, then stage it to local disk
	$(BIN)/shardsmith pack --config $(CONFIG)
	$(BIN)/shardsmith stage --config $(CONFIG)

bench: $(STAMP)  ## image path + pack and stage benchmarks (tables, ratios, build/bench/*.json)
	$(BIN)/python scripts/bench_pack.py
	$(BIN)/python scripts/bench_stage.py
	$(BIN)/python scripts/bench_nightly.py
	$(BIN)/python scripts/bench_read.py

clean:
	rm -rf build $(VENV)
