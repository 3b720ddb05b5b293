"""Smaller operator findings of Dagster operations round two (item 10): costs shown with float noise
(``0.129200000004``) where a person reads them, exact beside them; a failed step's metadata carried
only ``error_type`` (no step, partitions or store address); and the wording of a partition left
``partial`` by failed calls promised a retry nothing makes (item 9)."""

from __future__ import annotations

import socket
from decimal import Decimal

import dagster as dg

from rag_assets.assets.ingestion import partition_metadata
from rag_assets.definitions import build_definitions
from rag_assets.failures import as_failure
from rag_assets.run_costs import COST_TAG, EXACT_COST_TAG, run_cost_tags
from rag_engine.errors import StoreUnavailable
from rag_engine.ingest.documents import discover
from rag_engine.usage import UsageRecord, rounded_cost, shown_cost
from tests.conftest import ROOT


def test_costs_are_shown_to_the_micro_dollar_and_kept_exact():
    assert shown_cost(Decimal("0.129200000004")) == "0.1292" and shown_cost(0.129200000004) == "0.1292"
    assert shown_cost(Decimal("0E-12")) == "0" and shown_cost(None) is None
    assert shown_cost(Decimal("0.0000004")) == "0.0000004"  # never 0 for a cost that is not 0, no exponent
    assert shown_cost(Decimal("0.00042250000001")) == "0.0004225"  # a query's cost keeps its digits
    assert shown_cost(Decimal("12345.6789014")) == "12345.678901"  # never fewer than six decimals
    assert rounded_cost("0.129200000004") == 0.1292 and rounded_cost(Decimal("4E-7")) == 4e-7

    records = [
        UsageRecord(purpose="answer", provider="p", requested_model="m", cost=Decimal(c))
        for c in ("0.1", "0.029200000004")
    ]
    tags = run_cost_tags(records)
    assert tags[COST_TAG] == "0.1292" and tags[EXACT_COST_TAG] == "0.129200000004"

    meta = partition_metadata("llm_extraction", "done", {"cost_usd": "0.129200000004", "extracted": 3}, 1.0)
    assert meta["cost_usd"] == 0.1292 and meta["cost_usd_exact"] == "0.129200000004"


def test_status_renders_spend_rounded():
    from rag_engine.cli.render import _cost

    assert _cost({"cost": "0.129200000004"}) == "0.1292"
    assert _cost({"cost": None, "known_cost": "0.129200000004"}) == "unknown (>= 0.1292)"


def test_a_partial_partition_says_who_continues_it():
    failed_only = partition_metadata("llm_extraction", "partial", {"failed": 2, "skipped": 0}, 1.0)["reason"]
    assert "next run continues" not in failed_only
    assert "not retried by themselves" in failed_only and "materialize the partition again" in failed_only
    budget = partition_metadata("llm_extraction", "partial", {"failed": 0, "skipped": 4}, 1.0)["reason"]
    assert "document sensor continues" in budget
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "the next run continues them" not in readme


def test_failure_metadata_names_the_step_partitions_and_store():
    failure = as_failure(
        "graph_writes",
        StoreUnavailable("Neo4j stopped answering", uri="bolt://127.0.0.1:1", partition="a--1"),
        {"partitions": "a--1 ... c--1", "partition_count": 3},
    )
    meta = {k: v.value if hasattr(v, "value") else v for k, v in failure.metadata.items()}
    assert meta["step"] == "graph_writes" and meta["error_type"] == "StoreUnavailable"
    assert meta["store_address"] == "bolt://127.0.0.1:1" and meta["stopped_at_partition"] == "a--1"
    assert meta["partitions"] == "a--1 ... c--1" and meta["partition_count"] == 3


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_run_with_the_store_stopped_shows_step_partitions_and_address(variant, unique, monkeypatch):
    uri = f"bolt://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("NEO4J_URI", uri)
    defs = build_definitions(variant("failure-meta"))
    engine = defs.resources["rag"].engine()
    instance = dg.DagsterInstance.ephemeral()
    parts = sorted(r.partition_key for r in discover(engine.pack(unique), include_rejected=True))
    instance.add_dynamic_partitions(f"{unique}__document_versions", parts)
    tags = {"dagster/asset_partition_range_start": parts[0], "dagster/asset_partition_range_end": parts[-1]}
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection={dg.AssetKey([unique, "chunks"])})
    run = job.execute_in_process(instance=instance, tags=tags, raise_on_error=False)
    assert not run.success
    (failure,) = [e.event_specific_data.user_failure_data for e in run.get_step_failure_events()]
    meta = {k: v.value for k, v in failure.metadata.items()}
    assert meta["step"] == "chunks" and meta["store_address"] == uri
    assert meta["partition_count"] == len(parts) and meta["partitions"] == f"{parts[0]} ... {parts[-1]}"
    engine.close()


def test_rag_audit_lists_the_newest_50_by_default(tmp_path):
    """`rag audit` printed the whole trail; now the newest 50 (oldest first), --limit N or --all."""
    import json

    from rag_engine.config import load_config
    from rag_engine.engine import Engine
    from rag_engine.governance.audit import AuditRecord, audit_trail
    from tests.support.cli import rag

    env = {"RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}"}
    engine = Engine(load_config(ROOT / "config" / "engine.yaml"), ROOT, env)
    try:
        audit_trail(engine).append(*[AuditRecord(event="note", payload={"n": i}) for i in range(60)])
    finally:
        engine.close()
    data = json.loads(rag("audit", "--json", env=env).stdout)
    assert data["count"] == 50 and data["older_left_out"] is True and data["limit"] == 50
    assert [r["payload"]["n"] for r in data["records"]] == list(range(10, 60))  # the newest, oldest first
    assert json.loads(rag("audit", "--all", "--json", env=env).stdout)["count"] == 60
    few = json.loads(rag("audit", "--limit", "5", "--json", env=env).stdout)
    assert [r["payload"]["n"] for r in few["records"]] == list(range(55, 60))
    text = rag("audit", env=env).stdout
    assert "the newest 50 record(s), older ones left out (--limit N, --all)" in text
