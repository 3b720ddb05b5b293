"""The fusion stage over the legs' rows: weighted RRF (``fusion.fuse``), then what the question
names as two more ranked lists (the references it cites, the documents it names as a whole), a
lookup's exact hits first, and graph-only candidates kept below the last exact hit."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any

from rag_engine.retrieval.candidates import Candidate
from rag_engine.retrieval.fusion import Fused, fuse, rank_key
from rag_engine.retrieval.leg import Leg, Question
from rag_engine.store import reads
from rag_engine.store.session import Reads


def candidate(row: dict[str, Any], score: float, sources: tuple[str, ...], **extra: Any) -> Candidate:
    """A store row as a ranked candidate."""
    return Candidate(
        chunk_id=row["chunk_id"],
        anchor=row["anchor"],
        doc_id=row["doc_id"],
        heading=row["heading"] or "",
        text=row["text"],
        collection=row["collection"],
        score=round(score, 6),
        sources=sources,
        provenance=row.get("provenance"),
        **extra,
    )


def fused_pool(q: Question, legs: list[Leg], t: dict[str, Any]) -> list[Candidate]:
    """Every candidate of the legs, best first, under the ``fusion`` trace step ``t``."""
    cfg = q.engine.cfg.retrieval
    lists = {leg.name: leg.finish(q) for leg in legs}  # in the configured order: ties keep it
    fused = fuse(lists, cfg.rrf_k, q.weights)
    q.named = {f"{p.name}:{d}" for p in q.packs for d in p.documents_named(q.text)}
    refs = q.refs
    boosted = _reference_boost(
        q.rx, fused, refs.keys, refs.ambiguous_docs, cfg.ambiguous_ref_boost, q.named, cfg.scope_boost, cfg.rrf_k
    )
    if refs.lookup:  # exact reference hits first, in their own order, then the rest as fused
        lead = {r["chunk_id"]: i for i, r in enumerate(lists.get("exact", [])) if r["chunk_id"] not in refs.phrase_ids}
        boosted.sort(key=lambda p: lead.get(p[0].row["chunk_id"], len(lead)))
    paths = q.shared.get("graph_paths", {})
    pool = protect_exact(
        [
            candidate(
                f.row,
                score,
                _sources(f, refs.exact_ids, refs.phrase_ids),
                exact=f.row["chunk_id"] in refs.exact_ids,
                **paths.get(f.row["chunk_id"], {}),
            )
            for f, score in boosted
        ]
    )
    t.update(
        fused=len(fused),
        exact=len(refs.exact_ids),
        ambiguous_keys=refs.ambiguous,
        named_documents=sorted(q.named),
        boosted=sum(1 for f, score in boosted if score > f.score),
    )
    return pool


def protect_exact(candidates: list[Candidate]) -> list[Candidate]:
    """The candidates with every graph-only one (found by traversal alone) moved below the last
    exact hit: graph evidence may outrank text evidence by fusion, never a passage the question
    named by its reference or phrase."""
    last = max((i for i, c in enumerate(candidates) if c.exact), default=-1)
    head = candidates[: last + 1]
    graph_only = [c for c in head if c.sources == ("graph",)]
    if not graph_only:
        return candidates
    return [c for c in head if c.sources != ("graph",)] + graph_only + candidates[last + 1 :]


def _sources(f: Fused, exact_ids: set[str], phrase_ids: set[str]) -> tuple[str, ...]:
    cid = f.row["chunk_id"]
    if cid not in exact_ids:
        return f.sources
    kind = "exact_phrase" if cid in phrase_ids else "exact_reference"
    return (kind, *[s for s in f.sources if s != "exact"])


def _doc_of(row: dict[str, Any]) -> str:
    """``pack:doc_id`` of a store row (chunk ids start with their pack)."""
    return f"{row.get('pack') or row['chunk_id'].split(':', 1)[0]}:{row['doc_id']}"


def _reference_boost(
    rx: Reads,
    fused: list[Fused],
    keys: list[str],
    ambiguous_docs: set[str],
    weight: float,
    named_docs: AbstractSet[str] = frozenset(),
    scope_weight: float = 0.0,
    rrf_k: int = 60,
) -> list[tuple[Fused, float]]:
    """What the question names, as two more ranked lists fused by rank like any leg, then the
    candidates reordered by the new score (ties as in ``fuse``):

    - ``references`` (weight ``weight``): the candidates that cite the references the question
      names, or (at half strength) sit in a document answering a reference it names
      ambiguously ("Rule 3.8" without its rulebook), in their fused order;
    - ``scope`` (weight ``scope_weight``): the candidates of a document the question names as a
      whole ("under the AML Rulebook"), in their fused order.

    The n-th candidate of such a list gets ``weight * strength / (rrf_k + n)``: the best of them
    as much as a rank-1 hit of another leg, the later ones less, so a named document's weak
    passages do not all jump above strong ones elsewhere. They reorder; they never add a chunk."""
    if not fused or ((weight <= 0 or not keys) and (scope_weight <= 0 or not named_docs)):
        return [(f, f.score) for f in fused]
    cites = reads.citing(rx, [f.row["chunk_id"] for f in fused], keys) if weight > 0 and keys else {}
    bonus: dict[str, float] = {}
    ref_rank = scope_rank = 0
    for f in fused:
        cid, doc = f.row["chunk_id"], _doc_of(f.row)
        share = cites.get(cid, 0) / len(keys) if keys else 0.0
        strength = min(1.0, max(share, 0.5 if doc in ambiguous_docs else 0.0))
        if weight > 0 and strength > 0:
            ref_rank += 1
            bonus[cid] = bonus.get(cid, 0.0) + weight * strength / (rrf_k + ref_rank)
        if scope_weight > 0 and doc in named_docs:
            scope_rank += 1
            bonus[cid] = bonus.get(cid, 0.0) + scope_weight / (rrf_k + scope_rank)
    out = [(f, f.score + bonus.get(f.row["chunk_id"], 0.0)) for f in fused]
    out.sort(key=lambda p: rank_key(*p))
    return out
