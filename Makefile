# The two commands of the README: `make demo` and `make test`. Both set up what they need.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export VLLM_CPU_KVCACHE_SPACE := 1
export VLLM_ENABLE_V1_MULTIPROCESSING := 0
export RAY_USAGE_STATS_ENABLED := 0
export TOKENIZERS_PARALLELISM := false

.PHONY: setup test lint demo bench clean-demo

setup:
	@bash scripts/bootstrap.sh

lint: setup
	$(VENV)/bin/ruff check python services tests benchmarks operators

test: setup
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

demo: setup
	$(VENV)/bin/evr1 demo --out demo_out $(DEMO_ARGS)

bench: setup
	@for b in benchmarks/*.py; do case $$b in */_*) continue;; esac; echo "== $$b"; $(PY) $$b || exit 1; done

clean-demo:
	rm -rf demo_out
