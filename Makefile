# shardsmith: `make help` lists the targets; `make demo` runs the whole job on a generated example.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORE   := $(VENV)/.installed-core
DEV    := $(VENV)/.installed-dev
DEMO   ?= build/demo
CONFIG ?= configs/demo.yaml
CONSUMERS_VENV ?= build/consumers-venv

REPORT ?= build/reports/$(notdir $(basename $(CONFIG)))-$(shell date +%Y%m%d-%H%M%S).json

.DEFAULT_GOAL := help
.PHONY: help install install-dev test test-fast demo lint bench consumers stage nightly retrain-data clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | \
		awk 'BEGIN {FS = ":.*## "}; {printf "  make %-13s %s\n", $$1, $$2}'

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# The core install: everything pack, stage, verify, inspect and sheet need.
$(CORE): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	touch $(CORE)

# The test extras on top: pytest, TensorFlow, torch, DALI (CPU here), dask, ruff (about 3.6 GB).
# The dev extra pins the libraries the golden bytes depend on (docs/design.md, "Golden bytes").
$(DEV): pyproject.toml | $(BIN)/python
	# The CPU build of torch first: an unpinned install would pull a multi-GB CUDA build.
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(DEV) $(CORE)

install: $(CORE)  ## .venv with shardsmith alone (editable): enough to pack, stage and inspect

install-dev: $(DEV)  ## .venv with the test tools too (TensorFlow, torch, DALI, dask: ~3.6 GB)

# Three processes of tests, a test file each (its module's fixtures packed once), on 2 cores:
# a third of the suite's time is waiting (the S3 server, its retries and timeouts, killed
# packs), which a third process fills: six of the slow files took 161 s against 252 with two,
# the machine busy with other work both times.  The tests not marked slow mostly compute:
# there a third process only adds its imports (3.6 min against 3.2 with two).
TEST_PROCESSES ?= 3
FAST_TEST_PROCESSES ?= 2
test: $(DEV)  ## run the test suite
	$(BIN)/python -m pytest -q -n $(TEST_PROCESSES) --dist loadfile

# The tests marked slow (about a second or more each: the S3 server, killed packs, process
# groups) are left out: ~1,200 of ~1,800 tests in ~1.5 minutes on 2 cores, against ~20.
test-fast: $(DEV)  ## the tests not marked slow (~1.5 min): the edit loop; make test before a merge
	$(BIN)/python -m pytest -q -m "not slow" -n $(FAST_TEST_PROCESSES) --dist loadfile

lint: $(DEV)  ## ruff over the code, scripts and tests; the import layers (pyproject.toml)
	$(BIN)/ruff check shardsmith scripts tests
	$(BIN)/lint-imports

demo: $(CORE)  ## generate a small image tree, pack, stage, verify; then what to try next
	$(BIN)/python scripts/make_sample_tree.py $(DEMO)/source --count 40 --width 2400 --height 1800 --bad 3 --seed 1
	$(BIN)/shardsmith pack --config configs/demo.yaml
	$(BIN)/shardsmith stage --config configs/demo.yaml
	$(BIN)/shardsmith verify $(DEMO)/staged --decode
	@echo
	@echo "Next, try:"
	@echo "  $(BIN)/shardsmith inspect $(DEMO)/shards                    # classes x splits, rejects, duplicates"
	@echo "  $(BIN)/shardsmith sheet $(DEMO)/shards -o $(DEMO)/sheet.png --source $(DEMO)/source  # a contact sheet"
	@echo "  $(BIN)/shardsmith inspect $(DEMO)/shards --quality 12 --source $(DEMO)/source  # PSNR and SSIM per class"
	@echo "  $(BIN)/shardsmith inspect $(DEMO)/shards --near-duplicates   # the same part shot twice, across splits first"
	@echo "  $(BIN)/shardsmith log $(DEMO)/shards                        # the dataset's versions"
	@echo "  $(BIN)/shardsmith init-config > job.yaml                     # your own job: edit its paths, then"
	@echo "  $(BIN)/shardsmith pack --config job.yaml"

stage: $(CORE)  ## copy the dataset of CONFIG to its stage.to directory, verified; old shards removed
	$(BIN)/shardsmith stage --config $(CONFIG) --prune

# pack exits 3 when more images were rejected than allowed, with the dataset written all the
# same: verify and the HTML report run after any exit of pack, and the target fails with pack's
# code if it failed, else with verify's, else with the report's.
nightly: $(CORE)  ## for cron: pack CONFIG (a no-op when nothing changed), verify, JSON + HTML report
	@mkdir -p $(dir $(REPORT))
	@$(BIN)/shardsmith pack --config $(CONFIG) --quiet --report $(REPORT); packed=$$?; \
	$(BIN)/shardsmith verify --config $(CONFIG) --quiet; verified=$$?; \
	$(BIN)/shardsmith report --config $(CONFIG) -o $(REPORT:.json=.html); reported=$$?; \
	if [ $$packed -ne 0 ]; then exit $$packed; fi; \
	if [ $$verified -ne 0 ]; then exit $$verified; fi; exit $$reported

retrain-data: $(CORE)  ## before a retrain: pack CONFIG if needed, then stage it (old shards removed)
	$(BIN)/shardsmith pack --config $(CONFIG)
	$(BIN)/shardsmith stage --config $(CONFIG) --prune

bench: $(DEV)  ## pack, stage, readers, big trees, tiles, export, report, diff (tables, build/bench/*.json)
	$(BIN)/python scripts/bench_pack.py
	$(BIN)/python scripts/bench_nas.py
	$(BIN)/python scripts/bench_stage.py
	$(BIN)/python scripts/bench_s3.py
	$(BIN)/python scripts/bench_nightly.py
	$(BIN)/python scripts/bench_read.py
	$(BIN)/python scripts/bench_scale.py
	$(BIN)/python scripts/bench_tiles.py
	$(BIN)/python scripts/bench_schema.py
	$(BIN)/python scripts/bench_export.py
	$(BIN)/python scripts/bench_report.py
	$(BIN)/python scripts/bench_diff.py

# The trainers in a venv of their own (scripts/consumers_venv.sh says why): torch 2.14.1,
# torchvision 0.29.1, ultralytics 8.4.190, anomalib 2.7.0, pycocotools (~6.6 GB, ~2 minutes
# from a local wheel cache).
$(CONSUMERS_VENV)/.installed: scripts/consumers_venv.sh pyproject.toml
	scripts/consumers_venv.sh $(CONSUMERS_VENV)

consumers: $(CONSUMERS_VENV)/.installed  ## export every layout; Ultralytics, pycocotools, anomalib, torchvision check and train on it (CPU, offline)
	$(CONSUMERS_VENV)/bin/python scripts/check_consumers.py
	$(CONSUMERS_VENV)/bin/python scripts/check_anomalib_mvtec.py
	$(CONSUMERS_VENV)/bin/python scripts/check_ultralytics_reader.py

clean:  ## remove build/ and .venv
	rm -rf build $(VENV)
