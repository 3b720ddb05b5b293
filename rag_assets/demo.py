"""`make demo`: register every document version as a partition and materialize each demo pack's
ingestion job over all of them in ONE run, in the Dagster instance under $DAGSTER_HOME, then
answer a sample question with citations. Everything runs offline on the embedded defaults.

The demo packs are the GDPR and the company KB (``DEMO_PACKS``, comma-separated, or ``all``): the
ADGM rulebooks are 1,912 of the 2,613 chunks, so they stay one command away
(``rag ingest --pack adgm_rulebooks``). Embedding progress is printed at least every 10 s."""

from __future__ import annotations

import logging
import os
import sys
import time

import dagster as dg

from evals.cassettes.demo_question import QUESTION, ROLE
from rag_assets.definitions import build_definitions
from rag_assets.partitions import demo_pack_names, document_versions, partitions_name
from rag_assets.sensors import plan_partitions
from rag_engine.engine import Engine
from rag_engine.ingest.documents import discover
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


def demo_packs(engine_packs: dict[str, DomainPack], wanted: str | None) -> list[DomainPack]:
    listed = demo_pack_names(wanted or "")
    names = list(engine_packs) if listed is None else listed
    unknown = [n for n in names if n and n not in engine_packs]
    if unknown:
        raise SystemExit(f"DEMO_PACKS names packs that are not enabled: {unknown}; enabled: {sorted(engine_packs)}")
    return [engine_packs[n] for n in names if n]


def _progress_to_terminal() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[demo]   %(message)s"))
    progress = logging.getLogger("rag_engine.progress")
    progress.addHandler(handler)
    progress.setLevel(logging.INFO)
    # the lines also propagate to the managed ``rag_engine`` logger, which puts them in the run's log


def main() -> int:
    started_all = time.perf_counter()
    defs = build_definitions()
    if defs.resources is None:
        raise RuntimeError("build_definitions() returned Definitions without resources (the demo needs 'rag')")
    engine = defs.resources["rag"].engine()
    packs = demo_packs(engine.packs, os.environ.get("DEMO_PACKS"))
    _progress_to_terminal()
    print(f"[demo] ingesting {', '.join(p.name for p in packs)} in Dagster (one run per pack)", flush=True)
    with dg.DagsterInstance.get() as instance:
        for pack in packs:
            started = time.perf_counter()
            print(f"[demo] {pack.name}: {len(discover(pack))} documents, one Dagster run", flush=True)
            result = materialize_pack(defs, instance, pack)
            status = "ok" if result.success else "FAILED"
            print(f"[demo] {pack.name}: ingestion run {result.run_id} {status} in {time.perf_counter() - started:.1f}s")
            print("\n".join(step_lines(result)), flush=True)
            if not result.success:
                return 1
    return answer(engine, started_all)


def answer(engine: Engine, started_all: float) -> int:
    from rich.console import Console

    from rag_engine.cli import render
    from rag_engine.retrieval.query import run_query

    print(f"\n[demo] rag query {QUESTION!r} --role {ROLE}\n", flush=True)
    # the question embedded in process (checked against one server answer asked with the indexing
    # deadline), so a machine still busy after the ingest cannot time the question's embedding out
    engine.prepare_question_embedder()
    outcome = run_query(engine, QUESTION, ROLE)
    render.query(Console(highlight=False), outcome)
    ans = outcome.answer
    print()
    if ans.insufficient_evidence:
        print(f"[demo] no answer: {render.fallback_note(outcome)}")
    else:
        who = (
            f"the replay cassette ({ans.model}: recorded fixture answers, no model runs here)"
            if ans.method == "model"
            else "the extractive fallback (the top passage's first sentences)"
        )
        short = ans.text if len(ans.text) <= 240 else ans.text[:240].rsplit(" ", 1)[0] + " ..."
        print(f"[demo] found: {short}")
        print(f"[demo] answered from {who}, citing {', '.join(ans.citations)}")
    print(f"[demo] done in {time.perf_counter() - started_all:.0f}s. Roles: {', '.join(engine.cfg.roles)}.")
    print('[demo] next: .venv/bin/rag query "How many days of annual leave do full-time employees get?" \\')
    print("[demo]           --role employee")
    print("[demo]       .venv/bin/rag ingest --pack adgm_rulebooks   (the ADGM rulebooks, ~1,900 passages)")
    print("[demo]       make dev   (the Dagster UI on http://127.0.0.1:3000)")
    return 0 if not ans.insufficient_evidence else 1


if __name__ == "__main__":
    sys.exit(main())
