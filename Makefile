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

.PHONY: setup test test-fast lint demo demo-distributed bench clean-demo

setup:
	@bash scripts/bootstrap.sh

lint: setup
	$(VENV)/bin/ruff check python services tests benchmarks operators

test: setup
	$(VENV)/bin/pytest -q $(PYTEST_ARGS)

# The unit layer for development: no local cluster, no veRL/TRL, no test marked slow
# (end-to-end runs); `make test` stays the whole suite.
FAST_IGNORE := --ignore=tests/distributed --ignore=tests/interop --ignore=tests/benchmarks
test-fast: setup
	$(VENV)/bin/pytest -q -m "not slow" $(FAST_IGNORE) $(PYTEST_ARGS)

demo: setup
	$(VENV)/bin/evr1 demo --out demo_out $(DEMO_ARGS)

bench: setup
	@for b in benchmarks/*.py; do case $$b in */_*|*/gpu_*) continue;; esac; echo "== $$b"; $(PY) $$b || exit 1; done

clean-demo:
	rm -rf demo_out demo_out_distributed

# The demo in distributed mode: a local cluster (Redis, SeaweedFS, Ray, the services and the
# rollout pool) started by `evr1 up`, the same training against it, then `evr1 down`. Its own
# folder, so `make demo`'s results in demo_out stay beside it for comparison.
DIST_OUT := demo_out_distributed
demo-distributed: setup
	$(VENV)/bin/evr1 model tiny --family qwen2_5_vl --out $(DIST_OUT)/tiny-qwen2_5_vl
	$(VENV)/bin/evr1 up --dir .evr1 --model-path $(DIST_OUT)/tiny-qwen2_5_vl && \
	( $(VENV)/bin/evr1 demo --out $(DIST_OUT) --distributed $(DEMO_ARGS); rc=$$?; \
	  $(VENV)/bin/evr1 down --dir .evr1; exit $$rc )

# veRL and TRL for tests/interop: --no-deps into a folder outside the venv's site-packages, so
# the pinned stack never changes (requirements/interop.txt; docs/integrations.md).
INTEROP := $(VENV)/interop
test: $(INTEROP)/.installed
interop: $(INTEROP)/.installed
$(INTEROP)/.installed: requirements/interop.txt | setup
	@rm -rf $(INTEROP); echo "installing veRL/TRL for tests/interop into $(INTEROP)"; \
	$(VENV)/bin/pip install -q --no-deps --target $(INTEROP) -r $< 2>&1 | { grep -v "neither a file nor a directory" || true; }; \
	test $${PIPESTATUS[0]} -eq 0 && rm -rf $(INTEROP)/tests $(INTEROP)/scripts && touch $@
