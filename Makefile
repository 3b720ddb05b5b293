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

.PHONY: setup demo test dev neo4j-start neo4j-stop postgres-start postgres-stop bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

$(DAGSTER_HOME)/dagster.yaml: config/dagster.yaml
	mkdir -p $(DAGSTER_HOME)
	cp config/dagster.yaml $@

setup: $(VENV)/.installed $(DAGSTER_HOME)/dagster.yaml

neo4j-start:
	NEO4J_LOCAL_PORT=$(NEO4J_LOCAL_PORT) tools/neo4j-local/start.sh

neo4j-stop:
	tools/neo4j-local/stop.sh

postgres-start:
	PG_LOCAL_PORT=$(PG_LOCAL_PORT) tools/postgres-local/start.sh

postgres-stop:
	tools/postgres-local/stop.sh

demo: setup neo4j-start
	$(PY) -m rag_assets.demo

# pytest exits 5 when it collected no tests: that is a failure, never a silent pass.
test: setup neo4j-start postgres-start
	@$(PY) -m pytest $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

dev: setup neo4j-start
	$(VENV)/bin/dagster dev -w workspace.yaml

bench: setup neo4j-start
	$(PY) -m evals.bench.ingest

clean: neo4j-stop postgres-stop
	rm -rf var tools/neo4j-local/.state tools/postgres-local/.state
