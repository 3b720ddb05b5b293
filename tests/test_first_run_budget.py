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


def test_token_budget_reservations_hold_under_concurrency():
    """Sixteen threads start and settle calls against one run budget at once: the reserved and
    billed tokens together never pass the budget, and a call billed what it reserved leaves none."""
    import random
    import threading

    from rag_engine.ingest.extraction_step import RunBudget

    budget = RunBudget(max_chunks=10_000, max_tokens=4000, max_output_tokens=300)
    peak = [0]
    seen = threading.Lock()

    def worker(seed: int) -> None:
        rnd = random.Random(seed)
        for _ in range(200):
            worst = budget.worst_case(rnd.randint(50, 400))
            if budget.start(worst) is None:
                with seen:
                    peak[0] = max(peak[0], budget.tokens + budget.reserved)
                budget.settle(worst, rnd.randint(0, 30) if rnd.random() < 0.9 else worst, None)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.reserved == 0 and budget.tokens <= 4000 and peak[0] <= 4000, (budget.tokens, peak[0])
