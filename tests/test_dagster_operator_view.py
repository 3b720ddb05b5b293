"""What an operator sees of a pack's run in Dagster: the engine's own log lines in the run's event
log (the shipped instance config manages the ``rag_engine`` loggers)."""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg
import yaml

from rag_assets.definitions import build_definitions
from rag_assets.demo import materialize_pack

ROOT = Path(__file__).resolve().parents[1]


def _shipped_instance(home: Path) -> dg.DagsterInstance:
    """A SQLite instance under ``home`` loaded from a copy of config/dagster.yaml."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text((ROOT / "config" / "dagster.yaml").read_text())
    return dg.DagsterInstance.from_config(str(home))


def _empty_cassette(path: Path):
    """The demo replay provider reads an empty cassette: every extraction call is a ReplayMiss."""
    path.write_text("")
    line = "    cassette: evals/cassettes/demo.jsonl\n"

    def edit(text: str) -> str:
        assert line in text
        return text.replace(line, f"    cassette: {path}\n")

    return edit


def test_engine_logs_reach_the_run_event_log(variant, unique, tmp_path):
    shipped = yaml.safe_load((ROOT / "config" / "dagster.yaml").read_text())["python_logs"]
    assert shipped["managed_python_loggers"] == ["rag_engine"]
    defs = build_definitions(variant("logs", edit=_empty_cassette(tmp_path / "empty.jsonl")))
    pack = defs.resources["rag"].engine().pack(unique)
    with _shipped_instance(tmp_path / "dagster_home") as instance:
        assert instance.managed_python_loggers == ["rag_engine"]
        result = materialize_pack(defs, instance, pack)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        records = instance.all_logs(result.run_id)
    # rag_engine.ingest logs each partition's embedding progress (INFO) inside chunk_index: the
    # asset code never logs this line itself, so only the managed logger can have put it here
    embedded = [r for r in records if r.dagster_event is None and "chunks embedded" in r.user_message]
    assert len(embedded) == 2, [r.user_message for r in records if r.dagster_event is None]
    assert {r.step_key for r in embedded} == {f"{unique}__chunk_index"}
    assert {r.level for r in embedded} == {logging.INFO}
    # no cassette entry: rag_engine.ingest.extraction_step warns per failed call, from the extraction's
    # worker threads (3 chunks)
    failed = [r for r in records if r.dagster_event is None and r.user_message.startswith("extraction failed for")]
    assert len(failed) == 3 and all(r.user_message.endswith(": ReplayMiss") for r in failed), failed
    assert {(r.step_key, r.level) for r in failed} == {(f"{unique}__llm_extraction", logging.WARNING)}


def _partition_metadata(instance: dg.DagsterInstance, key: dg.AssetKey, run_id: str) -> dict[str, dict]:
    records = instance.fetch_materializations(key, limit=20).records
    return {
        r.asset_materialization.partition: {k: v.value for k, v in r.asset_materialization.metadata.items()}
        for r in records
        if r.run_id == run_id and r.asset_materialization is not None
    }


def test_failed_extraction_calls_warn_and_the_run_says_so(variant, unique, tmp_path):
    """Every extraction call fails (no cassette entry): the run succeeds (a failed call is not a
    failed partition), each llm_extraction partition is materialized with its failed-call count
    and no extracted chunk, and the extraction_calls_ok check fails at WARN with the count per
    reason; the failed calls are ledger records; no partition is stamped, so the next run retries
    them (and only them: the free steps are unchanged)."""
    defs = build_definitions(variant("failing", edit=_empty_cassette(tmp_path / "empty.jsonl")))
    engine = defs.resources["rag"].engine()
    pack = engine.pack(unique)
    instance = dg.DagsterInstance.ephemeral()
    key = dg.AssetKey([unique, "llm_extraction"])
    for attempt in (1, 2):
        result = materialize_pack(defs, instance, pack)
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        (check,) = [c for c in result.get_asset_check_evaluations() if c.check_name == "extraction_calls_ok"]
        assert check.check_name == "extraction_calls_ok"
        assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
        meta = {k: v.value for k, v in check.metadata.items()}
        assert meta == {
            "failed_calls": 3,
            "budget_skipped": 0,
            "failed_by_reason": {"ReplayMiss": 3},
            "rejected_by_reason": {},
        }
        assert check.description.startswith("3 failed call(s): 3 x ReplayMiss; 0 chunk(s) skipped by the run budget")
        assert "Failed calls are not retried by themselves" in check.description  # nothing promises a retry
        parts = _partition_metadata(instance, key, result.run_id)
        assert len(parts) == 2
        assert sorted(
            (m["outcome"], m["chunks"], m["failed"], m["extracted"], m["dagster/row_count"]) for m in parts.values()
        ) == [
            ("partial", 1, 1, 0, 0),
            ("partial", 2, 2, 0, 0),
        ]
        calls = [r for r in engine.ledger.records(run_id=result.run_id) if r.purpose == "graph_extraction"]
        assert [r.error_type for r in calls] == ["ReplayMiss"] * 3, calls
        chunks = _partition_metadata(instance, dg.AssetKey([unique, "chunks"]), result.run_id)
        assert {m["outcome"] for m in chunks.values()} == ({"done"} if attempt == 1 else {"unchanged"})
