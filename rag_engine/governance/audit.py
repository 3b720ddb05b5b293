"""Append-only audit trail: who asked what, with which role, what was withheld, what was cited.

Kept in the usage ledger's database (same URL: SQLite file by default, PostgreSQL by URL, through
SQLAlchemy Core; an append to a SQLite file through ``sqlite_records`` without it), so one backup
and one retention policy cover cost and governance; its schema is versioned beside the ledger's
(``records_sql.AUDIT_MIGRATIONS``, run once per database under a lock: replicas and ingest may
write one PostgreSQL trail together). Approvals live here too: each check, granted
or refused, and each approval request is an audit record. One record per
query (``event = "query"``) and one per governance event: ``collections_blocked``,
``local_inference_degraded``, ``generation_fallback``, ``freshness_breach`` and
``live_source_unavailable`` (the live SQL leg), ``approval_granted`` / ``approval_refused``,
``audit_records_deleted``; events of a query carry its ``query_id``.

What is never stored: the question text when the query could read a collection listed in
``audit.sensitive_collections`` (the record says ``question_redacted``), chunk text, the expanded
query, error details (only error types), any secret. The API appends and reads; the only deletion
is ``delete_expired``, records older than ``audit.retention_days`` whole days, and it needs an
approval (``rag_engine.governance.approvals``) that binds the cut-off and the exact count.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from rag_engine.errors import ApprovalMismatch, AuditError, QueryInputError
from rag_engine.governance.approvals import DELETE_AUDIT_RECORDS, Approval, require
from rag_engine.providers.ledger import ledger_url
from rag_engine.providers.records_db import RecordsDatabase
from rag_engine.providers.records_steps import AUDIT_STEPS

if TYPE_CHECKING:
    from sqlalchemy import RowMapping

    from rag_engine.engine import Engine as RagEngine
    from rag_engine.providers.sql_migrations import Migration

log = logging.getLogger(__name__)

GOVERNANCE_EVENTS = (
    "collections_blocked",
    "local_inference_degraded",
    "generation_fallback",
    "freshness_breach",
    "live_source_unavailable",
)
SUMMARY_EVENTS = ("query", *GOVERNANCE_EVENTS, "approval_refused")
"""What the daily summary counts: queries (the denominator), governance events, refused approvals."""


class AuditRecord(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int | None = None
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    event: str
    query_id: str | None = None
    session_id: str | None = None
    role: str | None = None
    actor: str | None = None
    payload: dict[str, Any] = {}


SESSION_ID_MAX = 128
"""Longest session id a query accepts: it is stored in ``audit_records.session_id`` (200) and, as
``session:<id>``, in the ledger's ``run_id`` (200); one limit on every ledger, SQLite or PostgreSQL."""
SESSION_ID_CHARS = "letters, digits and . _ : @ / -"
_SESSION_ID = re.compile(r"[A-Za-z0-9._:@/-]+")


def check_session_id(session_id: str | None) -> str | None:
    """A caller's session id, refused at the entry (QueryInputError) unless it is 1 to
    SESSION_ID_MAX characters of SESSION_ID_CHARS: never a database error after retrieval."""
    if session_id is None:
        return None
    if not 1 <= len(session_id) <= SESSION_ID_MAX:
        raise QueryInputError(
            f"session id must be 1 to {SESSION_ID_MAX} characters ({SESSION_ID_CHARS}); got {len(session_id)}"
        )
    if not _SESSION_ID.fullmatch(session_id):
        bad = next(c for c in session_id if not _SESSION_ID.fullmatch(c))
        raise QueryInputError(f"session id may hold only {SESSION_ID_CHARS}; got {bad!r}")
    return session_id


_USERINFO = re.compile(r"//[^/@\s]*@")


def scrub(value: Any) -> Any:
    """No error details (they may quote a URL or a request) and no userinfo/query in URLs."""
    if isinstance(value, Mapping):
        return {k: scrub(v) for k, v in value.items() if k not in ("detail", "message", "text", "question")}
    if isinstance(value, (list, tuple)):
        return [scrub(v) for v in value]
    if isinstance(value, str) and "://" in value:
        return _USERINFO.sub("//", value).split("?", 1)[0]
    return value


def _utc(at: datetime) -> datetime:
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).astimezone(UTC)


def retention_cutoff(retention_days: int, today: date | None = None) -> datetime:
    """Midnight UTC ``retention_days`` days before today: stable for a whole day, so a dry run and
    the approved deletion later that day bind the same inputs."""
    today = today or datetime.now(UTC).date()
    return datetime.combine(today - timedelta(days=retention_days), time(0), tzinfo=UTC)


def parse_since(text: str, now: datetime | None = None) -> datetime:
    """``7d``, ``24h``, ``30m``, an ISO date or an ISO date-time (UTC when no offset)."""
    now = now or datetime.now(UTC)
    m = re.fullmatch(r"\s*(\d+)\s*([dhm])\s*", text)
    if m:
        n, unit = int(m.group(1)), m.group(2)
        return now - {"d": timedelta(days=n), "h": timedelta(hours=n), "m": timedelta(minutes=n)}[unit]
    try:
        return _utc(datetime.fromisoformat(text.strip()))
    except ValueError:
        raise AuditError(f"--since {text!r}: use 7d, 24h, 30m, a date (2025-06-01) or an ISO date-time") from None


class AuditTrail(RecordsDatabase):
    """Append and read audit records; delete only expired ones, only with an approval. On a SQLite
    file an append imports no SQLAlchemy (``records_db``)."""

    _STEPS = AUDIT_STEPS

    def _migrations(self) -> Sequence[Migration]:
        from rag_engine.providers.records_sql import AUDIT_MIGRATIONS

        return AUDIT_MIGRATIONS

    def _failed(self, doing: str, exc: Exception) -> None:
        raise AuditError(f"audit trail {doing} failed ({type(exc).__name__})") from None

    # -- write ---------------------------------------------------------------------------
    @staticmethod
    def _row(rec: AuditRecord) -> dict[str, Any]:
        values = rec.model_dump(exclude={"id", "payload"})
        values["created_at"] = _utc(values["created_at"])
        values["payload"] = json.dumps(rec.payload, sort_keys=True, default=str)
        return values

    def append(self, *records: AuditRecord) -> list[AuditRecord]:
        """Append records in one transaction; returns them with their ids."""
        ids = self._insert("audit_records", [self._row(rec) for rec in records])
        return [rec.model_copy(update={"id": i}) for rec, i in zip(records, ids, strict=True)]

    def record_approval(
        self,
        *,
        action: str,
        approval: Approval | None,
        expected_hash: str,
        refused: str | None,
        session_id: str | None = None,
        actor: str | None = None,
        run_id: str | None = None,
    ) -> AuditRecord:
        payload: dict[str, Any] = {"action": action, "expected_inputs_hash": expected_hash}
        if run_id:  # the run it was asked for, a refusal included (an approval carries its own)
            payload["run_id"] = run_id
        if approval is not None:
            payload.update(
                {k: v for k, v in approval.model_dump(mode="json").items() if v is not None or k != "run_id"}
            )
        if refused:
            payload["refused"] = refused
        return self.append(
            AuditRecord(
                event="approval_refused" if refused else "approval_granted",
                session_id=session_id,
                actor=approval.approved_by if approval else actor,
                payload=payload,
            )
        )[0]

    # -- read ----------------------------------------------------------------------------
    def records(
        self,
        *,
        session_id: str | None = None,
        role: str | None = None,
        since: datetime | None = None,
        event: str | None = None,
        query_id: str | None = None,
        limit: int | None = None,
    ) -> list[AuditRecord]:
        from sqlalchemy import select

        from rag_engine.providers.records_sql import audit_records

        t = audit_records.c
        query = select(audit_records).order_by(t.id)
        for col, value in ((t.session_id, session_id), (t.role, role), (t.event, event), (t.query_id, query_id)):
            if value is not None:
                query = query.where(col == value)
        if since is not None:
            query = query.where(t.created_at >= _utc(since))
        if limit is not None:  # the newest ``limit``, still listed oldest first
            query = query.order_by(None).order_by(t.id.desc()).limit(limit)
        with self._engine.connect() as conn:
            rows = [_to_record(r._mapping) for r in conn.execute(query)]
        return sorted(rows, key=lambda r: r.id or 0)

    def daily_counts(self, since: datetime, events: tuple[str, ...] = SUMMARY_EVENTS) -> list[dict[str, Any]]:
        """Per UTC day since ``since`` (oldest first, every day listed): how many records of each of
        ``events`` were written. Counted while streaming, so the window may be large."""
        from sqlalchemy import select

        from rag_engine.providers.records_sql import audit_records

        t = audit_records.c
        first = _utc(since).date()
        days = {
            first + timedelta(days=i): dict.fromkeys(events, 0)
            for i in range((datetime.now(UTC).date() - first).days + 1)
        }
        query = select(t.created_at, t.event).where(t.created_at >= _utc(since), t.event.in_(events))
        with self._engine.connect() as conn:
            for created, name in conn.execution_options(yield_per=5000).execute(query):
                day = _utc(created).date()
                days.setdefault(day, dict.fromkeys(events, 0))[name] += 1
        return [{"day": d.isoformat(), **counts} for d, counts in sorted(days.items())]

    def call_ids(self, run_id: str, since: datetime) -> list[int]:
        """Ids of the usage records metered under ``run_id`` since ``since`` (the same database)."""
        ids = self._ids("usage_records", {"run_id": run_id}, {"created_at": since})
        if ids is not None:
            return ids
        from sqlalchemy import select

        from rag_engine.providers.records_sql import usage_records

        t = usage_records.c
        q = select(t.id).where(t.run_id == run_id, t.created_at >= since).order_by(t.id)
        with self._engine.connect() as conn:
            return [int(r[0]) for r in conn.execute(q)]

    def count(self) -> int:
        from sqlalchemy import func, select

        from rag_engine.providers.records_sql import audit_records

        with self._engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(audit_records)).scalar_one())

    # -- deletion: the one mutating operation, behind an approval ------------------------------
    def deletion_plan(self, retention_days: int, today: date | None = None) -> dict[str, Any]:
        """What ``delete_expired`` would remove: the canonical inputs an approval binds."""
        from sqlalchemy import func, select

        from rag_engine.providers.records_sql import audit_records

        cutoff = retention_cutoff(retention_days, today)
        t = audit_records.c
        with self._engine.connect() as conn:
            n, max_id = conn.execute(select(func.count(), func.max(t.id)).where(t.created_at < cutoff)).one()
        return {
            "action": DELETE_AUDIT_RECORDS,
            "before": cutoff.isoformat(),
            "records": int(n),
            "max_id": None if max_id is None else int(max_id),
        }

    def delete_expired(
        self, retention_days: int, approval: Approval | None, *, today: date | None = None
    ) -> dict[str, Any]:
        """Delete records older than the retention cut-off; refuse (nothing deleted) without an
        approval bound to exactly this plan. The approval and the deletion are both recorded."""
        from sqlalchemy import func, select

        from rag_engine.providers.records_sql import audit_records

        plan = self.deletion_plan(retention_days, today)
        require(approval, DELETE_AUDIT_RECORDS, plan, audit=self)
        cutoff = datetime.fromisoformat(plan["before"])
        t = audit_records.c
        with self._engine.begin() as conn:
            n = conn.execute(select(func.count()).where(t.created_at < cutoff)).scalar_one()
            if n != plan["records"]:  # a concurrent deletion: the approved plan no longer holds
                raise ApprovalMismatch(
                    f"the plan changed while deleting ({n} records, approved {plan['records']}); nothing was deleted"
                )
            deleted = conn.execute(audit_records.delete().where(t.created_at < cutoff)).rowcount
            done = AuditRecord(
                event="audit_records_deleted",
                actor=approval.approved_by if approval else None,
                payload={**plan, "deleted": deleted, "inputs_hash": approval.inputs_hash if approval else None},
            )
            conn.execute(audit_records.insert().values(**self._row(done)))
        return {**plan, "deleted": deleted, "approved_by": approval.approved_by if approval else None}


def _to_record(row: RowMapping) -> AuditRecord:
    data = dict(row)
    created = data["created_at"]
    if created is not None and created.tzinfo is None:  # SQLite drops the offset; we always write UTC
        data["created_at"] = created.replace(tzinfo=UTC)
    data["payload"] = json.loads(data["payload"] or "{}")
    return AuditRecord.model_validate(data)


def audit_trail(engine: RagEngine) -> AuditTrail:
    """The engine's audit trail (the ledger URL), built once per engine."""
    cache = engine.__dict__
    if "_audit_trail" not in cache:
        cache["_audit_trail"] = AuditTrail(ledger_url(engine.cfg, engine.env, engine.root))
    trail: AuditTrail = cache["_audit_trail"]
    return trail
