"""The live SQL leg as a retrieval leg: the packs' live sources (``live_source``), queried in a
thread beside the store for the permitted collections, their rows placed among the dense hits by
the question's embedding (``live_dense``) so they compete as stored passages do. Runs after the
dense leg in ``retrieval.legs`` (it reads the dense rows and the question's vector)."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from rag_engine.retrieval.dense_leg import QUESTION_POOL
from rag_engine.retrieval.leg import Leg, Question, register_leg
from rag_engine.retrieval.live_dense import place_on_dense
from rag_engine.retrieval.live_rows import LiveLeg
from rag_engine.retrieval.live_source import start_live_leg


@register_leg("live")
class LiveSourceLeg(Leg):
    """Rows of the packs' live SQL sources; their vectors left in ``q.shared["live_evidence"]``."""

    def __init__(self) -> None:
        self.future: Future[LiveLeg] | None = None

    def start(self, q: Question) -> None:
        if q.weight(self.name) > 0:
            self.future = start_live_leg(q.engine, q.text, q.collections, QUESTION_POOL)

    def search(self, q: Question, t: dict[str, Any]) -> list[dict[str, Any]]:
        leg = self.future.result() if self.future is not None else LiveLeg()
        t.update(leg.trace)
        q.events.extend(leg.events)
        dense = q.rows.get("dense", [])
        if leg.rows and q.query_vec is not None and q.engine.cfg.retrieval.live_on_dense:
            placed = place_on_dense(q.engine, leg.rows, dense, q.query_vec)
            q.rows["dense"], q.shared["live_evidence"] = placed.dense, placed.evidence
            t.update(placed.trace)
            q.events.extend(placed.events)
        return list(leg.rows)
