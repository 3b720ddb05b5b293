"""What a newcomer meets first: a CLI that starts at once, no driver notification noise, and
`rag status` / `rag costs` telling the truth about automation and spend."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteInstigatorOrigin, RemoteRepositoryOrigin
from dagster._core.scheduler.instigation import InstigatorState, InstigatorStatus, InstigatorType, SensorInstigatorData
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin

from rag_engine.config import DefaultsConfig, EngineConfig, LedgerConfig, ModelConfig, ProviderConfig, StorageConfig
from rag_engine.errors import ProviderError
from rag_engine.ops.status import _automation
from rag_engine.providers.clients import build_client
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.registry import ModelSpec
from rag_engine.store.connection import neo4j_target, open_driver
from rag_engine.usage import UsageRecord
from tests.conftest import ROOT
from tests.support.cli import rag
from tests.support.fake_openai import FakeOpenAI, server_error

# -- a CLI that starts at once -----------------------------------------------------------------

HEAVY = ("neo4j", "rag_engine.engine", "rag_engine.config", "pandas", "openai", "sqlalchemy")


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["query", "--help"]])
def test_help_and_version_import_no_driver_and_no_engine(args):
    """`rag --help` pays for typer and rich only: the driver, the engine, the config models and the
    ledger are imported when a command runs."""
    probe = (
        "import sys\n"
        "from rag_engine.cli.app import main\n"
        f"code = main({args!r})\n"
        f"print('LOADED', sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "LOADED []", done.stdout[-400:]


def test_a_one_off_query_imports_neither_pandas_nor_the_model_sdk():
    """A one-off `rag query` imports what answering needs: not pandas (no dependency of ours; the
    Neo4j driver imports it whenever it is installed, about 0.25 s), its question embedded over
    plain HTTP without the openai SDK (about 0.6 s; the SDK is imported at the first chat completion),
    and no SQLAlchemy (about 0.1 s) while no record has been read (the appends of a SQLite file:
    tests/providers/test_sqlite_records.py)."""
    probe = (
        "import sys\n"
        "from rag_engine.cli.app import main\n"
        "main(['query', '--help'])\n"
        "from rag_engine.retrieval.query import run_query\n"  # the query command's own imports
        "from rag_engine.governance.audit import audit_trail\n"
        "from rag_engine.engine import Engine\n"
        "import neo4j\n"
        "eng = Engine.from_path()\n"
        "eng.packs, eng.query_embedder, eng.client(eng.cfg.defaults.generation_model)\n"
        "print('LOADED', sorted(m for m in ('pandas', 'openai', 'sqlalchemy') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "LOADED []", done.stdout[-400:]


def test_driver_notifications_are_off(base_config, neo4j_driver, caplog):
    """A query naming a label, a relationship type and a property the store has never held
    (a fresh store) logs nothing: the server is asked for no notifications at all."""
    driver = open_driver(neo4j_target(base_config))
    try:
        with caplog.at_level(logging.DEBUG, logger="neo4j"):
            driver.execute_query("MATCH (n:NeverSeenLabel {never_seen_prop: 1})-[:NEVER_SEEN_TYPE]->(m) RETURN n, m")
    finally:
        driver.close()
    noisy = [r for r in caplog.records if r.name.startswith("neo4j.notifications")]
    assert noisy == []


# -- rag status: automation ---------------------------------------------------------------------


def _sensor_state(name: str, status: InstigatorStatus) -> InstigatorState:
    code = InProcessCodeLocationOrigin(LoadableTargetOrigin(python_file="definitions.py"))
    origin = RemoteInstigatorOrigin(RemoteRepositoryOrigin(code, "__repository__"), name)
    return InstigatorState(origin, InstigatorType.SENSOR, status, SensorInstigatorData())


def test_status_counts_sensors_declared_running_in_code(tmp_path: Path):
    """Dagster stores a sensor that runs because its code says so as DECLARED_IN_CODE, with its
    name nested in the origin; one an operator stopped as STOPPED. Written by Dagster itself."""
    home = tmp_path / "var" / "dagster_home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("")
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_instigator_state(_sensor_state("kb__new_document_versions", InstigatorStatus.DECLARED_IN_CODE))
        instance.add_instigator_state(_sensor_state("rag_automation", InstigatorStatus.RUNNING))
        instance.add_instigator_state(_sensor_state("nightly_quality", InstigatorStatus.STOPPED))

    auto = _automation({"DAGSTER_HOME": str(home)})
    assert auto is not None and auto["source"] == "DAGSTER_HOME"
    states = {i["name"]: i["on"] for i in auto["instigators"]}
    assert states == {"kb__new_document_versions": True, "rag_automation": True, "nightly_quality": False}

    # DAGSTER_HOME unset in the caller's shell: the project's own instance (the Makefile's default)
    fallback = _automation({}, tmp_path)
    assert fallback is not None and fallback["source"] == "project default"
    assert {i["name"] for i in fallback["instigators"] if i["on"]} == {"kb__new_document_versions", "rag_automation"}
    assert _automation({}, tmp_path / "elsewhere") is None  # no instance anywhere: said so, not guessed


# -- spend: a local embedder is free even when a call fails ---------------------------------------


def _local_embed_cfg(endpoint: str, *, hosted: bool) -> EngineConfig:
    return EngineConfig(
        storage=StorageConfig(ledger=LedgerConfig(url_env="RAG_TEST_LEDGER_URL")),
        providers=(
            ProviderConfig(name="embedder", kind="openai_compatible", hosted=hosted, endpoint=endpoint, max_retries=0),
        ),
        models=(
            ModelConfig(
                name="e5",
                provider="embedder",
                role="embedding",
                served_model="multilingual-e5-small-q4",
                dimension=8,
                capabilities=("embeddings",),
            ),
            ModelConfig(name="g", provider="embedder", role="generation", served_model="g"),
        ),
        defaults=DefaultsConfig(generation_model="g", embedding_model="e5"),
    )


@pytest.mark.parametrize(("hosted", "cost"), [(False, Decimal(0)), (True, None)])
def test_a_failed_call_to_a_local_embedder_costs_nothing(tmp_path: Path, hosted: bool, cost: Decimal | None):
    """One failed call used to turn the local embedder's spend from 0 into "unknown"; a hosted
    provider's failed call stays unknown (it may have been billed)."""
    with FakeOpenAI(dimension=8) as fake:
        cfg = _local_embed_cfg(fake.base_url, hosted=hosted)
        spec = ModelSpec(model=cfg.model("e5"), provider=cfg.provider("embedder"))
        ledger = UsageLedger(f"sqlite:///{tmp_path / 'l.sqlite'}")
        client = build_client(spec, ledger=ledger, env={}, root=tmp_path)
        fake.enqueue(server_error(500))
        with pytest.raises(ProviderError):
            client.embed(["a passage"], purpose="index")
        client.embed(["a passage"], purpose="index")
    failed, ok = ledger.records()
    assert (failed.status, failed.cost) == ("error", cost)
    assert ok.status == "ok" and ok.cost == (Decimal(0) if not hosted else None)


# -- rag costs: a table whose rows never break ---------------------------------------------------


def test_costs_is_a_table_whose_rows_stay_whole_in_a_pipe(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    ledger = UsageLedger(url)
    run = "0f6c2d1e-9d7a-4a53-8f1b-3c9e5b7a2d10"
    model = "a-rather-long-served-model-name-for-a-hosted-provider-2026-11-01"
    for _ in range(2):
        ledger.record(
            UsageRecord(
                run_id=run,
                purpose="answer",
                provider="openai",
                requested_model=model,
                input_tokens=123456,
                output_tokens=7890,
                cost=Decimal("0.0125"),
            )
        )
    ledger.dispose()
    res = rag("costs", env={"RAG_LEDGER_URL": url})
    assert res.exit_code == 0, res.output
    [row] = [line for line in res.stdout.splitlines() if run in line]
    assert model in row and "0.025000" in row and "246912" in row  # one line: nothing wrapped
    assert "usage and cost" in res.stdout and "total: 2 calls, 0 errors, cost 0.025000 USD" in res.stdout
    data = json.loads(rag("costs", "--json", env={"RAG_LEDGER_URL": url}).stdout)
    assert data["totals"] == {"calls": 2, "errors": 0, "cost": "0.0250", "unknown_cost_calls": 0, "estimated_calls": 0}


def test_closing_the_engine_closes_its_ledger_and_audit_connections(tmp_path: Path):
    """The console script exits without the interpreter's final garbage collection (`cli.app.run`),
    so nothing may rely on it: closing the engine closes the ledger's and the audit trail's
    connections, and a SQLite ledger is left without its write-ahead log."""
    from rag_engine.engine import Engine
    from rag_engine.governance.audit import audit_trail

    ledger = tmp_path / "ledger.sqlite"
    eng = Engine.from_path(env={"RAG_LEDGER_URL": f"sqlite:///{ledger}"})
    eng.ledger.count()
    audit_trail(eng).count()
    assert ledger.with_name("ledger.sqlite-wal").exists()  # open connections hold it
    eng.close()
    assert not ledger.with_name("ledger.sqlite-wal").exists()


def test_the_console_script_exits_with_the_commands_code():
    for args, code in ((["--version"], 0), (["query", "?"], 2)):  # no --role: bad input
        cmd = [sys.executable, "-m", "rag_engine.cli", *args]
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, timeout=60)
        assert done.returncode == code, done.stderr[-400:]
