# simfuse: `make demo` runs the main job on the shipped defaults, `make test` runs the test suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.simfuse-installed

.PHONY: demo test test-all bench lint venv clean gpu-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# CPU build of torch first (a bare `torch` would pull a multi-GB CUDA build), then triton for the interpreter.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[test,kernels,sweep,parquet]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/simfuse sweep --model models/dlrm_dcnv2.yaml --topology topologies/h200_nvl8_ib_ndr.yaml \
		--nodes 8,16,32,64,128,256,512,1024 --out runs/demo

test: $(STAMP)
	TRITON_INTERPRET=1 $(PY) -m pytest

test-all: $(STAMP)
	TRITON_INTERPRET=1 $(PY) -m pytest -m "slow or not slow"

bench: $(STAMP)
	$(PY) experiments/bench_engine.py

lint: $(STAMP)
	$(VENV)/bin/ruff check simfuse tests experiments

clean:
	rm -rf $(VENV) runs .pytest_cache

# On a GPU machine: compile every accepted kernel configuration class, check against float64, time headline shapes.
gpu-check:
	PYTHONPATH=$(CURDIR) python3 experiments/gpu_check.py --out experiments/results/h200_gpu_check_new
