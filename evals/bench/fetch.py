"""How far must the vector index be over-fetched? Recall of the fused top k against the fetch size,
on the golden sets, over whatever the database holds (ingest the shipped packs first).

The vector index cannot filter by collection or currency, so ``store.reads.vector`` asks it for
``fetch`` neighbours and keeps the permitted ones (growing the fetch only when fewer than k
remain). For each golden question this fuses the fulltext leg with the dense leg read at each
fetch size, exactly as ``retrieve`` weighs them, and compares the fused top k with the one an
exhaustive fetch (VECTOR_FETCH_CAP) gives, and with the gold anchors. It also compares the dense
leg alone with the exact nearest neighbours (cosine over every permitted chunk, no index): the
index is approximate (HNSW), so even a large fetch can miss one.

    python -m evals.bench.fetch [--factors 1 2 3 5 10]
"""

from __future__ import annotations

import argparse
import statistics

from evals.runner import default_role, load_golden
from rag_engine.engine import Engine
from rag_engine.governance.policy import gate
from rag_engine.retrieval.fusion import fuse
from rag_engine.store import measurement, reads
from rag_engine.store.epochs import active_index
from rag_engine.store.session import Reads, read_transaction


def exact_neighbours(
    rx: Reads, embedding: list[float], collections: tuple[str, ...], k: int, identity: str
) -> set[str]:
    """The true k nearest permitted chunks, by brute force over the active index's property."""
    prop = active_index(rx, identity)[0].property
    return measurement.exact_neighbours(rx, embedding=embedding, collections=collections, k=k, prop=prop)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--factors", type=float, nargs="+", default=[1, 2, 3, 5, 10])
    args = ap.parse_args()
    engine = Engine.from_path()
    cfg = engine.cfg.retrieval
    legs = engine.leg_weights
    k, dense_k = cfg.final_k, cfg.dense_k
    fetches = [*sorted({max(dense_k, int(dense_k * f)) for f in args.factors}), reads.VECTOR_FETCH_CAP]
    same: dict[int, list[float]] = {f: [] for f in fetches}
    gold_recall: dict[int, list[float]] = {f: [] for f in fetches}
    exact_recall: dict[int, list[float]] = {f: [] for f in fetches}
    for path in engine.cfg.evals.golden:
        golden = load_golden(engine.root / path)
        role_default = golden.get("role") or default_role(engine, golden["pack"])
        for q in golden["queries"]:
            collections = gate(engine.cfg, q.get("role", role_default)).collections
            vec = engine.embed_texts([q["question"]], purpose="query")[0]
            with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
                lexical = reads.fulltext(rx, q["question"], collections, cfg.lexical_k)
                exact = exact_neighbours(rx, vec, collections, dense_k, engine.embedder_identity)
                tops = {}
                for fetch in fetches:
                    dense = reads.vector(rx, vec, collections, dense_k, engine.embedder_identity, fetch=fetch)
                    exact_recall[fetch].append(len({r["chunk_id"] for r in dense} & exact) / max(1, len(exact)))
                    fused = fuse({"lexical": lexical, "dense": dense}, cfg.rrf_k, legs)[:k]
                    tops[fetch] = [f.row["anchor"] for f in fused]
            exhaustive = set(tops[reads.VECTOR_FETCH_CAP])
            gold = set(q.get("gold") or [])
            for fetch, top in tops.items():
                same[fetch].append(len(set(top) & exhaustive) / max(1, len(exhaustive)))
                if gold:
                    gold_recall[fetch].append(len(set(top) & gold) / len(gold))
    engine.close()
    print(f"fused top {k} (fulltext {cfg.lexical_k} + dense {dense_k}), {len(same[fetches[0]])} golden questions")
    print(f"{'fetch':>6} {'x dense_k':>9} {'= exhaustive top k':>19} {'gold recall@k':>14} {'dense = exact':>14}")
    for fetch in fetches:
        print(
            f"{fetch:>6} {fetch / dense_k:>9.1f} {statistics.fmean(same[fetch]):>19.4f} "
            f"{statistics.fmean(gold_recall[fetch]):>14.4f} {statistics.fmean(exact_recall[fetch]):>14.4f}"
        )


if __name__ == "__main__":
    main()
