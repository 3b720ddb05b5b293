"""The schema steps of the SQL records as plain data (component, version, name): ``records_sql``
pairs each with the SQLAlchemy that applies it, and an append to a SQLite file (``records_db``)
checks that the file lists them all without importing SQLAlchemy. A new step gets the next
version; an applied one never changes."""

from __future__ import annotations

Step = tuple[str, int, str]

LEDGER_STEPS: tuple[Step, ...] = (
    ("ledger", 1, "usage_records"),
    ("ledger", 2, "usage_records actor, estimated"),
)
AUDIT_STEPS: tuple[Step, ...] = (("audit", 1, "audit_records"),)
