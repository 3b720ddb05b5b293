"""The stages after fusion and rerank: the top k (a bounded graph tail, exact hits first, a cap on
graph-only candidates) and deterministic reference expansion (chunks the top k cite, reported apart)."""

from __future__ import annotations

from typing import Any

from rag_engine.graph.quality_bounds import bounded
from rag_engine.retrieval.candidates import Candidate
from rag_engine.retrieval.fusion_stage import candidate
from rag_engine.retrieval.leg import Question
from rag_engine.store import reads


def top_k(q: Question, pool: list[Candidate]) -> list[Candidate]:
    """The top k of the pool, with the graph tail, then exact hits first and at most
    ``traversal.max_graph_only_in_top_k`` graph-only ones, whatever the weights (graph/quality_bounds)."""
    ordered = with_graph_tail(pool, q.k, q.engine.cfg.retrieval.graph_tail)
    taken = {c.chunk_id for c in ordered}  # the pool holds a chunk once
    return bounded(
        ordered + [c for c in pool if c.chunk_id not in taken], q.k, q.engine.cfg.traversal.max_graph_only_in_top_k,
        exact=lambda c: c.exact, graph=lambda c: "graph" in c.sources, graph_only=lambda c: c.sources == ("graph",),
    )[: q.k]  # fmt: skip


def with_graph_tail(pool: list[Candidate], k: int, tail: int) -> list[Candidate]:
    """The top k of ``pool``, with up to ``tail`` chunks the graph reached that fusion ranked below
    k (best fused first) placed at the end of it: the graph may add what text retrieval cannot
    rank, in the last places, never above the fused top k - tail nor over an exact hit. Chunks
    only the graph found that are in the top k already count against the tail."""
    top = pool[:k]
    reached = [c for c in pool[k:] if "graph" in c.sources]
    room = tail - sum(1 for c in top if c.sources == ("graph",))
    if room <= 0 or not reached:
        return top
    droppable = [i for i in range(len(top) - 1, -1, -1) if not top[i].exact and top[i].sources != ("graph",)]
    dropped = set(droppable[: min(room, len(reached))])  # reached is non-empty: len(top) == k
    return [c for i, c in enumerate(top) if i not in dropped] + reached[: len(dropped)]


def reference_expansion(q: Question, ordered: list[Candidate], t: dict[str, Any]) -> list[Candidate]:
    """Chunks the top k (exact hits aside) cite, at most ``retrieval.reference_expansion_k``, each
    scored half its seed's score; never one already in the top k."""
    limit = q.engine.cfg.retrieval.reference_expansion_k
    have = {c.chunk_id for c in ordered}
    seeds = [c.chunk_id for c in ordered if not c.exact][: max(3, limit)]
    by_id = {c.chunk_id: c for c in ordered}
    cited = q.shared.get("cited")
    if cited is not None and all(s in cited for s in seeds):  # read with the top candidates
        rows, t["read"] = cited_by(seeds, cited, limit), "with_top_candidates"
    else:
        rows = reads.referenced(q.rx, seeds, q.collections, limit)
    added = []
    for row in rows:
        if row["chunk_id"] in have:
            continue
        seed_score = by_id[row["from_chunk"]].score if row["from_chunk"] in by_id else 0.0
        added.append(candidate(row, seed_score * 0.5, ("reference",), via=f"{row['via']} <- {row['from_chunk']}"))
    t["added"] = len(added)
    return added


def cited_by(seeds: list[str], cited: dict[str, list[dict[str, Any]]], limit: int) -> list[dict[str, Any]]:
    """What ``reads.referenced`` returns for ``seeds``, from the rows each seed cites (read with the
    top candidates, ``store.top_reads``): each chunk cited by a seed and not a seed itself, once,
    through its first seed (then the citation's raw text, nulls last), ordered by that seed's
    rank, then chunk id; at most ``limit``."""
    if limit <= 0:
        return []
    best: dict[str, tuple[tuple[int, bool, str], dict[str, Any]]] = {}
    for rank, seed in enumerate(seeds):
        for row in cited[seed]:
            if row["chunk_id"] in seeds:
                continue
            key = (rank, row["via"] is None, row["via"] or "")
            if row["chunk_id"] not in best or key < best[row["chunk_id"]][0]:
                best[row["chunk_id"]] = (key, {**row, "seed_rank": rank, "from_chunk": seed})
    ordered = sorted(best.values(), key=lambda kv: (kv[0][0], kv[1]["chunk_id"]))
    return [row for _, row in ordered[:limit]]
