# simfuse: `make demo` runs the main job on the shipped defaults, `make test` runs the test suite.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CORE := $(VENV)/.simfuse-core
FULL := $(VENV)/.simfuse-full

.PHONY: demo test test-all bench lint venv clean gpu-check

# Two installs in one venv.  The simulator (`make demo`) needs only the core dependencies: no torch, triton, pyarrow
# or dask (the demo writes CSV and PNG files and runs its points in a local process pool).  `make test` adds the
# test tools, the kernels extra (torch CPU + triton: the kernel tests run under TRITON_INTERPRET=1) and the optional
# Parquet / Dask outputs, so every test runs; without them those tests skip.
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(CORE): pyproject.toml | $(PY)
	$(PY) -m pip install -q -e .
	touch $(CORE)

# torch for the kernel tests: its CPU build.  `pip install torch==2.13.0` gets it where pip's configuration offers the
# CPU wheel (a local find-links); on a stock PyPI machine that pin pulls the multi-GB CUDA build, so name PyTorch's
# CPU index there: `make test TORCH_INDEX=https://download.pytorch.org/whl/cpu`.
TORCH_INDEX ?=
TORCH_PIP_INDEX := $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX) --extra-index-url https://pypi.org/simple,)

$(FULL): pyproject.toml $(CORE)
	# CPU build of torch first (a bare `torch` would pull a multi-GB CUDA build), then triton for the interpreter.
	$(PY) -m pip install -q $(TORCH_PIP_INDEX) torch==2.13.0
	$(PY) -m pip install -q -e ".[test,kernels,sweep,parquet]"
	touch $(FULL)

venv: $(FULL)

# The DLRM projection: MLPerf DLRM-DCNv2 with planned sharding on H100 and H200 nodes, 8 to 1,024 nodes, strong
# scaling, bands from 8 draws of the files' input ranges (experiments/scaling/dlrm_projection.py --demo).  The README's
# headline is the same script without --demo (weak scaling too, 16 draws, tornados at 128 and 1,024 nodes).
demo: $(CORE)
	$(PY) experiments/scaling/dlrm_projection.py --demo --out runs/demo

test: $(FULL)
	TRITON_INTERPRET=1 $(PY) -m pytest

test-all: $(FULL)
	TRITON_INTERPRET=1 $(PY) -m pytest -m "slow or not slow"

bench: $(CORE)
	$(PY) experiments/bench/bench_engine.py

lint: $(FULL)
	$(VENV)/bin/ruff check simfuse tests experiments

clean:
	rm -rf $(VENV) runs .pytest_cache

# On a GPU machine: compile every accepted kernel configuration class, check against float64, time headline shapes.
gpu-check:
	PYTHONPATH=$(CURDIR) python3 experiments/gpu_campaigns/gpu_check.py --out experiments/results/h200_gpu_check_new
