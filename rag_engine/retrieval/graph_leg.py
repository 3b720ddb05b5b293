"""The graph leg: the planner (with its five traced fallbacks), then, when it says traverse,
bounded traversal from its seed entities. The chunks reached enter fusion by rank like every other
leg (weight ``retrieval.weights.graph``), so a graph-only chunk outranks a lexical and dense hit
only when the weights say so."""

from __future__ import annotations

from rag_engine.graph.planner import plan
from rag_engine.graph.traversal import candidate_chunks, traverse
from rag_engine.retrieval.leg import Leg, Question, register_leg
from rag_engine.store import reads


@register_leg("graph")
class GraphLeg(Leg):
    """Rows in path score order, at most ``traversal.max_candidates``; each one's path score and
    hops in ``q.shared["graph_paths"]`` (set on its candidate by fusion). Two trace steps:
    ``planner`` (always) and ``traversal`` (when it runs)."""

    def run(self, q: Question) -> None:
        engine, rx = q.engine, q.rx
        with q.trace.step("planner") as t:
            decision = plan(rx, q.text, q.packs, engine.cfg.planner, engine.cfg.traversal, q.collections)
            t.update(reason=decision.reason, seeds=[s.name for s in decision.seeds], detail=decision.detail)
            if "edges_cached" in rx.memo:
                t["eligible_edges_cached"] = rx.memo["edges_cached"]
            q.plan = decision.model_dump(mode="json")
        q.rows[self.name] = []
        if not decision.traverse or q.weight(self.name) <= 0:
            return
        with q.trace.step("traversal", max_depth=engine.cfg.traversal.max_depth, weight=q.weight(self.name)) as t:
            paths = traverse(rx, [(s.entity_id, s.name) for s in decision.seeds], engine.cfg.traversal, q.collections)
            picked = candidate_chunks(paths, engine.cfg.traversal.max_candidates)
            rows = {r["chunk_id"]: r for r in reads.chunks_by_id(rx, [c for c, _ in picked], q.collections)}
            q.rows[self.name] = [rows[c] for c, _ in picked if c in rows]
            q.shared["graph_paths"] = {
                chunk_id: {
                    "path_score": gp.path_score,
                    "path": tuple({"seed": gp.seed_name, **h.model_dump()} for h in gp.hops),
                }
                for chunk_id, gp in picked
                if chunk_id in rows
            }
            t.update(
                paths=len(paths),
                candidates=len(q.rows[self.name]),
                path_scores=[round(gp.path_score, 4) for c, gp in picked if c in rows],
                dropped_not_permitted=len(picked) - len(q.rows[self.name]),
            )
