"""`make demo`: register every document version as a partition and materialize each pack's
ingestion job over all of them in ONE run, in the Dagster instance under $DAGSTER_HOME, then
answer a sample question with citations. Everything runs offline on the embedded defaults."""

from __future__ import annotations

import sys
import time

import dagster as dg

from rag_assets.definitions import build_definitions
from rag_assets.partitions import document_versions, partitions_name
from rag_assets.sensors import plan_partitions
from rag_engine.documents import discover
from rag_engine.packs import DomainPack

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"


def register_partitions(instance: dg.DagsterInstance, pack: DomainPack) -> list[str]:
    name = partitions_name(document_versions(pack.name))
    found = [r.partition_key for r in discover(pack)]
    add, superseded = plan_partitions(list(instance.get_dynamic_partitions(name)), found)
    for key in superseded:
        instance.delete_dynamic_partition(name, key)
    if add:
        instance.add_dynamic_partitions(name, add)
    return list(instance.get_dynamic_partitions(name))


def materialize_pack(defs: dg.Definitions, instance: dg.DagsterInstance, pack: DomainPack) -> dg.ExecuteInProcessResult:
    keys = register_partitions(instance, pack)
    job = defs.resolve_job_def(f"{pack.name}__ingest")
    return job.execute_in_process(
        instance=instance, tags={RANGE_START: keys[0], RANGE_END: keys[-1]}, raise_on_error=False, run_config=QUIET
    )


QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
"""Dagster's console at WARNING: the demo prints one line per step itself (the UI has the rest)."""


def step_lines(result: dg.ExecuteInProcessResult) -> list[str]:
    """One line per step of the run: asset, partitions materialized, seconds."""
    lines: list[str] = []
    for event in result.all_events:
        if event.event_type_value in ("STEP_SUCCESS", "STEP_FAILURE"):
            seconds = getattr(event.event_specific_data, "duration_ms", None)
            took = f" in {seconds / 1000:.1f}s" if seconds else ""
            outcome = "ok" if event.event_type_value == "STEP_SUCCESS" else "FAILED"
            lines.append(f"[demo]   {event.step_key}: {outcome}{took}")
    return lines


def main() -> int:
    defs = build_definitions()
    if defs.resources is None:
        raise RuntimeError("build_definitions() returned Definitions without resources (the demo needs 'rag')")
    engine = defs.resources["rag"].engine()
    with dg.DagsterInstance.get() as instance:
        for pack in engine.packs.values():
            started = time.perf_counter()
            result = materialize_pack(defs, instance, pack)
            status = "ok" if result.success else "FAILED"
            print(f"[demo] {pack.name}: ingestion run {result.run_id} {status} in {time.perf_counter() - started:.1f}s")
            print("\n".join(step_lines(result)))
            if not result.success:
                return 1
    from rag_engine.cli import main as rag

    question = "When must a controller notify a personal data breach to the supervisory authority?"
    print(f"\n[demo] rag query {question!r} --role legal_analyst\n")
    return rag(["query", question, "--role", "legal_analyst", "-k", "5"])


if __name__ == "__main__":
    sys.exit(main())
