"""What one query returns, and its audit record: begun before retrieval, written after the answer.

The record is built from the query's outcome (what was permitted, withheld, retrieved and cited) and appended to
the engine's audit trail (``rag_engine.governance.audit``), which knows nothing of queries.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from rag_engine import tracing
from rag_engine.errors import AuditError, RagError

if TYPE_CHECKING:
    from rag_engine.engine import Engine

from rag_engine.governance.audit import GOVERNANCE_EVENTS, AuditRecord, audit_trail, check_session_id, scrub
from rag_engine.retrieval.answer import Answer
from rag_engine.retrieval.candidates import RetrievalResult
from rag_engine.retrieval.context import AssembledContext

log = logging.getLogger(__name__)


class QueryOutcome(BaseModel):
    model_config = ConfigDict(frozen=True)

    question: str
    expanded_query: str
    retrieval: RetrievalResult
    context: AssembledContext
    answer: Answer
    events: tuple[dict[str, Any], ...]
    latency_ms: float


def _path(hops: Any, sensitive: list[str]) -> list[dict[str, Any]]:
    """A graph path's hops for the audit record: ids, types, confidences and evidence chunks; entity
    names too unless the query could read a sensitive collection (as the question itself)."""
    keep = ("from_id", "to_id", "type", "confidence", "chunk_id") + (() if sensitive else ("seed", "to_name"))
    return [{k: h.get(k) for k in keep} for h in hops or ()]


def _answer_kind(answer: Any) -> str:
    return "insufficient_evidence" if answer.insufficient_evidence else "answer"


class QueryAudit:
    """One query's audit: started before retrieval (its time is the candidates' ``retrieved_at``),
    written after the answer by ``record``. ``run_id`` is what model calls are metered under:
    the caller's, else ``session:<id>``, so the record can list the ledger ids of its calls."""

    def __init__(
        self,
        engine: Engine,
        session_id: str | None,
        run_id: str | None,
        generate: bool = True,
        actor: str | None = None,
    ):
        self.engine = engine
        self.session_id = check_session_id(session_id)
        self.query_id = uuid.uuid4().hex
        self.started_at = datetime.now(UTC)
        self.run_id = run_id or (f"session:{session_id}" if session_id else None)
        self.generate = generate
        self.actor = actor
        """The authenticated principal the query ran for (the query service), else None."""
        self.trace_id = tracing.trace_id()
        """The OpenTelemetry trace the query's spans belong to (``rag_engine.tracing``), else None."""

    def _model_calls(self) -> list[int] | None:
        """Ledger ids of the calls made under this query's run id since it started (None: the
        calls carry no run id, so they cannot be told apart from other queries')."""
        if self.run_id is None:
            return None
        if "ledger" not in self.engine.__dict__:
            return []  # no metered client was built in this process: no model call
        return audit_trail(self.engine).call_ids(self.run_id, self.started_at)

    def build(self, outcome: QueryOutcome) -> list[AuditRecord]:
        cfg = self.engine.cfg.audit
        retrieval = outcome.retrieval
        permitted = list(retrieval.collections)
        blocked = sorted(
            {c for e in retrieval.events if e.get("event") == "collections_blocked" for c in e.get("blocked", [])}
        )
        sensitive = sorted(set(permitted) & set(cfg.sensitive_collections))
        answer = outcome.answer
        now = datetime.now(UTC)
        payload = {
            "question": None if sensitive else outcome.question,
            "question_redacted": bool(sensitive),
            "sensitive_collections": sensitive,
            "retrieved_at": self.started_at.isoformat(),
            "run_id": self.run_id,
            "collections_permitted": permitted,
            "collections_blocked": blocked,
            "candidates": [
                {
                    "chunk_id": c.chunk_id,
                    "collection": c.collection,
                    "sources": list(c.sources),
                    "via": c.via,
                    **({"provenance": c.provenance.model_dump(mode="json")} if c.provenance else {}),
                    # a graph candidate's path and score, so a traversal can be explained later
                    **(
                        {"path_score": c.path_score, "path": _path(c.path, sensitive)}
                        if c.path_score is not None
                        else {}
                    ),
                }
                for c in retrieval.candidates
            ],
            "plan": {k: (retrieval.plan or {}).get(k) for k in ("traverse", "reason")} if retrieval.plan else None,
            "expansions": [c.chunk_id for c in retrieval.expansions],
            # how much of the caller's conversation the answer model saw (counts, never the text)
            "conversation": {
                "kept": len(outcome.context.conversation),
                "overflow": sum(1 for o in outcome.context.overflow if o.category == "conversation"),
            },
            "cited": list(answer.citations),
            "answer": {
                "kind": _answer_kind(answer),
                "method": answer.method,
                "reason": answer.reason,
                "model": answer.model,
                "error_type": answer.error_type,
                "fallback": answer.fallback,
            },
            "model_calls": self._model_calls(),
            "events": [e.get("event") for e in outcome.events],
            "latency_ms": outcome.latency_ms,
            "trace_id": self.trace_id,
        }
        common: dict[str, Any] = {
            "created_at": now,
            "query_id": self.query_id,
            "session_id": self.session_id,
            "role": retrieval.role,
            "actor": self.actor,
        }
        records = [AuditRecord(event="query", payload=payload, **common)]
        for e in outcome.events:
            name = e.get("event")
            if name in GOVERNANCE_EVENTS:
                records.append(AuditRecord(event=name, payload=scrub(dict(e)), **common))
        if self.generate and answer.method == "extractive":
            records.append(
                AuditRecord(
                    event="generation_fallback",
                    **common,
                    payload={
                        "method": answer.method,
                        "error_type": answer.error_type,
                        "reason": answer.fallback
                        or ("generation_failed" if answer.error_type else "no_usable_generation_model"),
                        "generation_model": self.engine.cfg.defaults.generation_model,
                    },
                )
            )
        return records

    def record(self, outcome: QueryOutcome) -> list[AuditRecord]:
        """Write the query's records; per ``audit.on_write_error`` a failure raises or is logged."""
        cfg = self.engine.cfg.audit
        if not cfg.enabled:
            return []
        records = self.build(outcome)
        try:
            return audit_trail(self.engine).append(*records)
        except RagError as exc:  # the trail's own errors are AuditError or LedgerUnavailable
            if cfg.on_write_error == "fail":
                raise AuditError(
                    f"the query's audit record could not be written ({exc}); no unaudited answer "
                    "is returned (audit.on_write_error: fail)"
                ) from None
            log.error(
                "audit write failed (%s); record kept in this log: %s",
                type(exc).__name__,
                [r.model_dump(mode="json") for r in records],
            )
            return []
