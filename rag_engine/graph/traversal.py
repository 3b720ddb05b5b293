"""Bounded traversal over retrieval-eligible inferred edges, with transparent path scores.

    path_score = mean_edge_confidence / path_length + relationship_bonus

relationship_bonus is the mean, over the path's edges, of traversal.relationship_bonus[type]
(0 for types not listed). Expansion is breadth-first, one query per hop, and every hop keeps
at most ``per_seed_limit`` edges per frontier entity (highest confidence first), so a dense
graph costs the same as a sparse one. Paths never revisit an entity. Each path's evidence is
the chunk its last edge was extracted from; a candidate chunk carries its best path. The hops
run in the question's read transaction (``store.session.Reads``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from rag_engine.config import TraversalConfig
from rag_engine.store.graph_reads import hop
from rag_engine.store.session import Reads


class Hop(BaseModel):
    model_config = ConfigDict(frozen=True)

    from_id: str
    to_id: str
    to_name: str
    type: str
    confidence: float
    chunk_id: str
    forward: bool


class GraphPath(BaseModel):
    model_config = ConfigDict(frozen=True)

    seed_id: str
    seed_name: str
    hops: tuple[Hop, ...]
    mean_edge_confidence: float
    relationship_bonus: float
    path_score: float

    @property
    def evidence_chunk(self) -> str:
        return self.hops[-1].chunk_id


def score_path(hops: tuple[Hop, ...], bonus: dict[str, float]) -> tuple[float, float, float]:
    mean = sum(h.confidence for h in hops) / len(hops)
    rel_bonus = sum(bonus.get(h.type, 0.0) for h in hops) / len(hops)
    return round(mean, 6), round(rel_bonus, 6), round(mean / len(hops) + rel_bonus, 6)


def traverse(
    rx: Reads,
    seeds: list[tuple[str, str]],
    cfg: TraversalConfig,
    collections: tuple[str, ...],
) -> list[GraphPath]:
    """All bounded paths from the seeds ((entity_id, name) pairs), best first, capped; only over
    traversable edges (``store.quality_predicates.traversable``: full provenance, evidence chunk current,
    of an enabled pack and in a permitted collection)."""
    paths: list[GraphPath] = []
    for seed_id, seed_name in seeds:
        partial: list[tuple[Hop, ...]] = [()]
        seed_paths: list[GraphPath] = []
        for _depth in range(cfg.max_depth):
            frontier = sorted({(p[-1].to_id if p else seed_id) for p in partial})
            rows = hop(
                rx, frontier=frontier, floor=cfg.confidence_floor, fanout=cfg.per_seed_limit, collections=collections
            )
            by_from: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                by_from.setdefault(row["from_id"], []).append(row)
            extended = []
            for p in partial:
                visited = {seed_id, *(h.to_id for h in p)}
                for row in by_from.get(p[-1].to_id if p else seed_id, []):
                    if row["to_id"] in visited:
                        continue
                    hops = (*p, Hop(**row))
                    mean, bonus, score = score_path(hops, cfg.relationship_bonus)
                    seed_paths.append(
                        GraphPath(
                            seed_id=seed_id,
                            seed_name=seed_name,
                            hops=hops,
                            mean_edge_confidence=mean,
                            relationship_bonus=bonus,
                            path_score=score,
                        )
                    )
                    extended.append(hops)
            # keep the frontier bounded too: only the best partial paths are extended further
            extended.sort(key=lambda h: -score_path(h, cfg.relationship_bonus)[2])
            partial = extended[: cfg.per_seed_limit]
            if not partial:
                break
        seed_paths.sort(key=lambda gp: (-gp.path_score, len(gp.hops), gp.evidence_chunk))
        paths += seed_paths[: cfg.per_seed_limit]
    paths.sort(key=lambda gp: (-gp.path_score, len(gp.hops), gp.evidence_chunk))
    return paths[: cfg.max_paths]


def candidate_chunks(paths: list[GraphPath], max_candidates: int) -> list[tuple[str, GraphPath]]:
    """Distinct evidence chunks, each with its best path, at most ``max_candidates``."""
    best: dict[str, GraphPath] = {}
    for gp in paths:
        if gp.evidence_chunk not in best:
            best[gp.evidence_chunk] = gp
    return list(best.items())[:max_candidates]
