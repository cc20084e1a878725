# lean-tpu-pipelines: `make help` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
FASHION_MNIST := /usr/share/datasets/fashion-mnist

# make run knobs: TASK is classification or detection (it picks the pipeline: end_to_end or
# detection); CONFIG a YAML file and SET 'name=value ...' set any parameter of that pipeline's run
# form, under the Kubeflow UI's names (model_options.image_size=128 sets one key of a mapping).
# DATA, LIMIT, EPOCHS, STEPS, BUDGET and PROD are shorthands for source, limit_per_split, epochs,
# steps_per_epoch, time_budget (90s, 10m, 2h; auto for none) and promote_to_prod; left empty, they take the task's defaults
# (pipelines/tools/run_local.py). SET wins over the shorthands, they win over CONFIG (docs/parameters.md).
TASK ?= classification
CONFIG ?=
SET ?=
DATA ?=
LIMIT ?=
EPOCHS ?=
STEPS ?=
BUDGET ?=
PROD ?=
OUT ?= local_outputs
# VERBOSE=1: print every step's whole output as it runs (kfp.local's echo included), as well as the logs.
VERBOSE ?=
# make compile knobs; SWEEP_PARALLELISM: grid cells at once in sweep/gpu_vs_tpu (a literal in the
# YAML, kfp takes no parameter there; default 4, 0 for no limit)
IMAGE ?=
SWEEP_PARALLELISM ?=
# make search knobs: SEARCH a search file (docs/sweep.md, "Search"; default: 12 trials on the digits),
# DRY_RUN=1 to plan and price its rungs without running anything.
SEARCH ?=
DRY_RUN ?=
# SEARCH_RUNGS: the search pipeline's rungs of successive halving (a search file must ask for as many).
SEARCH_RUNGS ?=
DIST := dist/pipelines
# make submit knobs: PIPELINE (a name of make compile's: end_to_end, detection, sweep, ...), KFP_HOST,
# EXPERIMENT (default: the cluster's Default experiment); CONFIG and SET as for make run
PIPELINE ?= end_to_end
EXPERIMENT ?=
# make images knobs: the engine (docker or podman; default: the first that answers), the base
# image (default the Dockerfile's python:3.11-slim-bookworm) and the variants built
REGISTRY ?= ghcr.io/lean-tpu-pipelines
TAG ?= 0.1.0
CONTAINER_TOOL ?=
BASE_IMAGE ?=
VARIANTS ?= cpu gpu tpu tpu-vm

.PHONY: help setup data prometheus browser run serve monitor sweep search predict select retrain submit schedule unschedule test test-fast bench lint format compile upload images resolve clean

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

setup: $(STAMP) data prometheus ## Create .venv with the project and its test tools, the demo data and Prometheus

data: ## Install the demo data (Debian's dataset-fashion-mnist) when missing
	@if [ -d $(FASHION_MNIST) ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing dataset-fashion-mnist (Debian package)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null; \
	else \
	  echo "note: $(FASHION_MNIST) missing and apt-get unavailable (run 'sudo apt-get install dataset-fashion-mnist');" \
	       "the converter falls back to Keras' downloader"; \
	fi

browser: ## Install headless Chromium (Debian's chromium) for the tests that open pages, when missing
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing chromium (Debian package) for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
	  echo "note: chromium missing and apt-get unavailable (run 'sudo apt-get install chromium');" \
	       "the browser tests will fail"; \
	fi

prometheus: ## Install Prometheus and promtool (Debian's prometheus package) when missing: the monitoring tests use them
	@if command -v prometheus >/dev/null && command -v promtool >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing prometheus (Debian package; the tests start their own on loopback, not its service)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; \
	else \
	  echo "note: prometheus/promtool missing and apt-get unavailable (run 'sudo apt-get install prometheus');" \
	       "the Prometheus tests are skipped"; \
	fi

serve: $(STAMP) ## Serve every stage `make run` promoted (URLs and metrics pages) until Ctrl-C
	$(PY) -m components.serving.serve --stages-root '$(OUT)/stages'

monitor: $(STAMP) ## Drift and input-quality checks of the traffic `make serve` sampled, per stage: WINDOW=1h MODEL=classifier
	$(PY) -m components.monitor.drift --stages-root '$(OUT)/stages' --window '$(or $(WINDOW),1h)' --model '$(or $(MODEL),classifier)'

# SET reaches the command through the environment: its text may hold quotes of its own.
run sweep search predict select retrain submit schedule: export LTP_SET = $(SET)

run: setup ## Run the main pipeline locally (kfp.local); TASK=detection DATA=folder|coco.json CONFIG=run.yaml SET='epochs=20 model_options.image_size=128' LIMIT=0 EPOCHS=N STEPS=N BUDGET=10m PROD=true VERBOSE=1 RUNNER=container
	@$(PY) -m pipelines.tools.run_local --task '$(TASK)' $(if $(CONFIG),--config '$(CONFIG)') --set "$$LTP_SET" \
	  $(if $(DATA),--data '$(DATA)') $(if $(LIMIT),--limit $(LIMIT)) $(if $(EPOCHS),--epochs $(EPOCHS)) \
	  $(if $(STEPS),--steps-per-epoch $(STEPS)) $(if $(BUDGET),--budget '$(BUDGET)') $(if $(PROD),--prod '$(PROD)') \
	  --pipeline-root '$(OUT)' $(if $(RUNNER),--runner '$(RUNNER)') \
	  $(if $(filter-out 0 false,$(VERBOSE)),--verbose)

sweep: setup ## Run the sweep pipeline locally over a CPU grid (kfp.local) and print its table; GRID=cells.yaml CONFIG=sweep.yaml SET='steps_per_epoch=8'
	@$(PY) -m pipelines.tools.run_sweep $(if $(GRID),--grid '$(GRID)') $(if $(CONFIG),--config '$(CONFIG)') --set "$$LTP_SET" \
	  --pipeline-root '$(OUT)' $(if $(filter-out 0 false,$(VERBOSE)),--verbose)

search: setup ## Run a cost-aware search locally (kfp.local): successive halving, the frontier and the pick; SEARCH=search.yaml DRY_RUN=1 (plan and price only) CONFIG=form.yaml SET='limit_per_split=300'
	@$(PY) -m pipelines.tools.run_search $(if $(SEARCH),--search '$(SEARCH)') $(if $(filter-out 0 false,$(DRY_RUN)),--dry-run) \
	  $(if $(CONFIG),--config '$(CONFIG)') --set "$$LTP_SET" --pipeline-root '$(OUT)' $(if $(filter-out 0 false,$(VERBOSE)),--verbose)

# make predict's OUT is where the predictions go (the pipeline root stays local_outputs), as its users name it.
# It needs .venv only (not the demo data or Prometheus): a DATA that is not there is one line at once.
PREDICT_ROOT := $(if $(filter command line,$(origin OUT)),local_outputs,$(OUT))
predict: $(STAMP) ## Score images with what a stage serves (kfp.local): DATA=folder|list.csv|coco.json STAGE=staging MODEL=detector OUT=dir (or MODEL_DIR=folder) FORMAT=litert_int8 STAGES=local_outputs/stages CONFIG=predict.yaml SET='batch_size=32'
	@$(PY) -m pipelines.tools.run_predict $(if $(DATA),--data '$(DATA)') $(if $(STAGE),--stage '$(STAGE)') \
	  $(if $(MODEL),--model '$(MODEL)') $(if $(MODEL_DIR),--model-dir '$(MODEL_DIR)') $(if $(FORMAT),--format '$(FORMAT)') \
	  --stages '$(or $(STAGES),$(PREDICT_ROOT)/stages)' \
	  --output-uri '$(if $(filter command line,$(origin OUT)),$(OUT),$(PREDICT_ROOT)/predictions)' \
	  $(if $(CONFIG),--config '$(CONFIG)') --set "$$LTP_SET" --pipeline-root '$(PREDICT_ROOT)' \
	  $(if $(filter-out 0 false,$(VERBOSE)),--verbose)

# make select's OUT is where the pick goes, as make predict's; N how many images, DATASET the labelled
# dataset whose images are never picked.
select: $(STAMP) ## Pick the images worth labelling next (kfp.local): DATA=pool/ STAGE=staging MODEL=classifier (or MODEL_DIR=folder) N=100 DATASET=dataset/ OUT=dir CONFIG=select.yaml SET='strategy=margin seed=1'
	@$(PY) -m pipelines.tools.run_select $(if $(DATA),--data '$(DATA)') $(if $(STAGE),--stage '$(STAGE)') \
	  $(if $(MODEL),--model '$(MODEL)') $(if $(MODEL_DIR),--model-dir '$(MODEL_DIR)') $(if $(N),--count $(N)) \
	  $(if $(DATASET),--dataset '$(DATASET)') --stages '$(or $(STAGES),$(PREDICT_ROOT)/stages)' \
	  --output-uri '$(if $(filter command line,$(origin OUT)),$(OUT),$(PREDICT_ROOT)/selection)' \
	  $(if $(CONFIG),--config '$(CONFIG)') --set "$$LTP_SET" --pipeline-root '$(PREDICT_ROOT)' \
	  $(if $(filter-out 0 false,$(VERBOSE)),--verbose)

submit: $(STAMP) ## Start a run on Kubeflow: PIPELINE=detection CONFIG=run.yaml SET='epochs=20' KFP_HOST=... (uploads or reuses the pipeline version; PREFLIGHT=off skips the TPU check)
	@test -n "$(KFP_HOST)" || { echo "error: set KFP_HOST, e.g. make submit KFP_HOST=http://localhost:8080"; exit 2; }
	@$(PY) -m pipelines.tools.submit_run --pipeline '$(PIPELINE)' --host '$(KFP_HOST)' $(if $(CONFIG),--config '$(CONFIG)') \
	  --set "$$LTP_SET" $(if $(EXPERIMENT),--experiment '$(EXPERIMENT)') $(if $(IMAGE),--image '$(IMAGE)') --dir $(DIST) \
	  $(if $(filter off 0 false,$(PREFLIGHT)),--no-preflight)

# make retrain: the retrain pipeline against the local stages; without DATA, the source the served
# model was trained on (right after make run: nothing to do). docs/retraining.md
retrain: $(STAMP) ## Retrain when it matters (kfp.local): DATA=folder MODEL=classifier BUDGET=10m (or 2.50: dollars) DRIFT=drift.json STAGES=dir CONFIG=retrain.yaml SET='change_thresholds.accuracy=-0.02'
	@$(PY) -m pipelines.tools.run_retrain $(if $(DATA),--data '$(DATA)') $(if $(MODEL),--model '$(MODEL)') \
	  $(if $(BUDGET),--budget '$(BUDGET)') $(if $(DRIFT),--drift '$(DRIFT)') --stages '$(or $(STAGES),$(OUT)/stages)' \
	  $(if $(CONFIG),--config '$(CONFIG)') --set "$$LTP_SET" --pipeline-root '$(OUT)' \
	  $(if $(filter-out 0 false,$(VERBOSE)),--verbose)

# KFP's cron has 6 fields, seconds first: CRON='0 0 3 * * *' is 03:00 every day.
schedule: $(STAMP) ## The retrain pipeline as one recurring run on Kubeflow: KFP_HOST=... CRON='0 0 3 * * *' CONFIG=retrain.yaml SET='retrain_budget=20m' EXPERIMENT=name (again: replaces it)
	@$(PY) -m pipelines.tools.schedule --host '$(KFP_HOST)' $(if $(CRON),--cron '$(CRON)') $(if $(CONFIG),--config '$(CONFIG)') \
	  --set "$$LTP_SET" $(if $(EXPERIMENT),--experiment '$(EXPERIMENT)') $(if $(IMAGE),--image '$(IMAGE)') --dir $(DIST)

unschedule: $(STAMP) ## Delete the retrain pipeline's recurring run: KFP_HOST=... EXPERIMENT=name
	@$(PY) -m pipelines.tools.schedule --remove --host '$(KFP_HOST)' $(if $(EXPERIMENT),--experiment '$(EXPERIMENT)')

# make test's workers (pytest-xdist): one test module each at a time, the slowest first (tests/conftest.py).
# A worker that dies ends the run (no replacement), naming the test it died in (xdist 3.8 can wait forever
# after replacing a dead worker under --dist loadfile); a hung test fails after pytest-timeout's limit.
TEST_WORKERS ?= 2

test: setup browser ## Run the test suite (what CI runs) on TEST_WORKERS workers and print its slowest tests
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --max-worker-restart=0 --timeout=900 --timeout-method=signal --durations=25

test-fast: setup ## Run the tests that do not train, convert or start servers
	$(PY) -m pytest -q -m 'not slow and not integration and not benchmark'

bench: setup ## Run the benchmarks (prints ratios against baselines)
	$(PY) -m pytest -q -s -m benchmark tests/benchmarks

# The peer benchmark's own virtualenv (PyTorch and Ultralytics, about 6 GB): made here only.
PEER_VENV := .venv-peer
PEER_STAMP := $(PEER_VENV)/.installed-stamp
# make bench-peer knobs: LTP_PEER_SEEDS (1; 3 for reported figures), LTP_PEER_FIRST_SEED (0), LTP_PEER_MINUTES (5; 2,5,10 for
# the curve), LTP_PEER_MODELS (yolov8n.yaml; add yolo11n.yaml) in the environment
$(PEER_STAMP): tests/benchmarks/peer/requirements.txt
	@test -x $(PEER_VENV)/bin/python || $(PYTHON) -m venv $(PEER_VENV)
	$(PEER_VENV)/bin/python -m pip install -q --upgrade pip
	$(PEER_VENV)/bin/python -m pip install -q -r tests/benchmarks/peer/requirements.txt
	@touch $@

bench-peer: setup $(PEER_STAMP) ## Our detector against Ultralytics YOLO at equal minutes (makes .venv-peer, ~6 GB)
	$(PY) -m pytest -q -s -m benchmark tests/benchmarks/test_bench_peer.py

lint: $(STAMP) ## ruff lint + format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP) ## ruff fix + format
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

compile: $(STAMP) ## Compile every pipeline to dist/pipelines/<name>.yaml (IMAGE=..., ACCELERATOR=gke-tpu-v5e-2x4, PULL_SECRETS=regcred, SECRET_NAME=..., RUN_TTL_S=...)
	$(if $(PULL_SECRETS),LTP_PULL_SECRETS='$(PULL_SECRETS)') $(if $(SECRET_NAME),LTP_SECRET_NAME='$(SECRET_NAME)') \
	$(if $(RUN_TTL_S),LTP_RUN_TTL_S='$(RUN_TTL_S)') \
	$(PY) -m pipelines.tools.compile --output-dir $(DIST) $(if $(IMAGE),--image '$(IMAGE)') \
	  $(if $(SWEEP_PARALLELISM),--sweep-parallelism $(SWEEP_PARALLELISM)) $(if $(SEARCH_RUNGS),--search-rungs $(SEARCH_RUNGS)) \
	  $(if $(ACCELERATOR),--accelerator '$(ACCELERATOR)')

upload: compile ## Upload the compiled pipelines to KFP_HOST (new pipeline or new version)
	@test -n "$(KFP_HOST)" || { echo "error: set KFP_HOST, e.g. make upload KFP_HOST=http://localhost:8080"; exit 2; }
	$(PY) -m pipelines.tools.upload --host '$(KFP_HOST)' --dir $(DIST)

images: ## Build the four image variants (cpu, -gpu, -tpu, -tpu-vm) with Docker or Podman (CONTAINER_TOOL, BASE_IMAGE, VARIANTS)
	@tool='$(CONTAINER_TOOL)'; \
	if [ -z "$$tool" ]; then \
	  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then tool=docker; \
	  elif command -v podman >/dev/null && podman info >/dev/null 2>&1; then tool=podman; \
	  else echo "error: no container engine answers (docker info, podman info); start one or set CONTAINER_TOOL" >&2; exit 2; fi; \
	fi; \
	for v in $(VARIANTS); do \
	  tag=$(REGISTRY)/lean-tpu-pipelines:$(TAG)$$( [ $$v = cpu ] || echo -$$v ); \
	  echo "$$tool build $$tag"; \
	  $$tool build $(if $(BASE_IMAGE),--build-arg BASE_IMAGE='$(BASE_IMAGE)') --build-arg VARIANT=$$v -t $$tag . || exit 1; \
	  $$tool image inspect --format '{{.Size}}' $$tag | awk -v t=$$tag '{printf "%s: %.2f GB\n", t, $$1 / 1e9}'; \
	done

resolve: $(STAMP) ## Resolve every image variant's dependencies against the package index (installs nothing)
	$(PY) -m pipelines.tools.resolve

clean: ## Remove build outputs and local runs (keeps .venv)
	rm -rf dist build $(OUT) .pytest_cache .ruff_cache
