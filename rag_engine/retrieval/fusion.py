"""Weighted reciprocal rank fusion of the retrieval legs, and the tie-break every ranking uses."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Fused(BaseModel):
    """One chunk after weighted RRF, with what the tie-break needs."""

    model_config = ConfigDict(frozen=True)

    row: dict[str, Any]
    score: float
    sources: tuple[str, ...]
    best_rank: int
    lexical_score: float | None


def fuse(lists: dict[str, list[dict[str, Any]]], rrf_k: int, weights: dict[str, float] | None = None) -> list[Fused]:
    """Weighted reciprocal rank fusion: ``sum(weight_leg / (rrf_k + rank_leg))``, robust to
    incomparable score scales (BM25 vs cosine). A leg of weight 0 contributes nothing.

    Ties (a chunk at rank r in one list against a chunk at rank r in another) are broken by the
    best single-leg rank, then by the lexical score: evidence, never the chunk id (which sorts
    by file name). The id is only the last resort that keeps equal evidence deterministic.
    """
    weights = weights or {}
    scores: dict[str, float] = {}
    rows: dict[str, dict[str, Any]] = {}
    sources: dict[str, list[str]] = {}
    best: dict[str, int] = {}
    lexical: dict[str, float] = {}
    for name, hits in lists.items():
        weight = weights.get(name, 1.0)
        if weight <= 0:
            continue
        for rank, row in enumerate(hits, 1):
            cid = row["chunk_id"]
            scores[cid] = scores.get(cid, 0.0) + weight / (rrf_k + rank)
            rows.setdefault(cid, row)
            sources.setdefault(cid, []).append(name)
            best[cid] = min(best.get(cid, rank), rank)
            if name == "lexical":
                lexical[cid] = float(row.get("score") or 0.0)
    fused = [
        Fused(row=rows[c], score=scores[c], sources=tuple(sources[c]), best_rank=best[c], lexical_score=lexical.get(c))
        for c in scores
    ]
    return sorted(fused, key=lambda f: rank_key(f, f.score))


def rank_key(f: Fused, score: float) -> tuple[float, int, float, str]:
    """Higher score first; ties to the best single-leg rank, then the lexical score; the chunk id
    only keeps fully equal evidence deterministic."""
    lexical = f.lexical_score if f.lexical_score is not None else float("-inf")
    return (-round(score, 12), f.best_rank, -lexical, f.row["chunk_id"])
