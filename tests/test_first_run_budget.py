"""A new pack's first paid extraction run gets the conservative budget (budgets.first_run) unless
configured otherwise; later runs, and free local models, get the configured one. Real Neo4j."""

from __future__ import annotations

from rag_engine.config import load_config
from rag_engine.engine import Engine
from rag_engine.graph import writer
from rag_engine.ingest.extraction_step import new_budget
from tests.conftest import ROOT, _neo4j_uri
from tests.test_approval_paths import _priced_extraction


def test_first_paid_extraction_run_of_a_pack_is_conservative(variant, unique, neo4j_driver):
    paid = Engine(load_config(variant("first-run", edit=_priced_extraction)), ROOT, {"NEO4J_URI": _neo4j_uri()})
    free = Engine(load_config(variant("first-run-free")), ROOT, {"NEO4J_URI": _neo4j_uri()})
    try:
        first = new_budget(paid, unique)
        assert first.first_run and (first.max_chunks, first.max_tokens, first.batch_size) == (10, 4000, 2)
        assert not new_budget(free, unique).first_run  # a free local model: the configured budget
        writer.write_extraction_run(
            paid.driver, paid.database, pack=unique, run_id=f"{unique}-1", model="m", prompt_hash="p",
            chunks=1, cache_hits=0, tokens=10, cost="0", status="complete", skipped=0, failures=0,
        )  # fmt: skip
        later = new_budget(paid, unique)
        b = paid.cfg.budgets
        assert not later.first_run and (later.max_chunks, later.max_tokens, later.batch_size) == (
            b.max_chunks_per_run,
            b.max_tokens_per_run,
            b.batch_size,
        )
    finally:
        paid.driver.execute_query("MATCH (r:ExtractionRun {pack: $p}) DELETE r", p=unique)
        paid.close()
        free.close()
