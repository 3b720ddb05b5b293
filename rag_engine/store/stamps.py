"""Cypher of the step stamps on (:DocumentVersion) nodes (``ingest.stamps`` decides what a stamp
says). The caller passes version keys and stamp text as parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import neo4j

_READ = """
MATCH (d:Document {pack: $pack})-[:HAS_VERSION]->(v:DocumentVersion {status: 'current'})
RETURN v.key AS key, v.step_versions AS stamps
"""

_WRITE = """
UNWIND $rows AS row
MATCH (v:DocumentVersion {key: row.key}) WHERE v.status IN ['pending', 'current']
SET v.step_versions = row.stamps
"""

_LOCK_LIVE = """
UNWIND $keys AS key
MATCH (v:DocumentVersion {key: key}) WHERE v.status IN ['pending', 'current']
SET v.step_versions_at = datetime()
RETURN v.key AS key, v.step_versions AS stamps
"""

_SET = """
UNWIND $rows AS row
MATCH (v:DocumentVersion {key: row.key})
SET v.step_versions = row.stamps
"""

_MISSING = """
CALL () {
  MATCH (d:Document {pack: $pack})-[:HAS_VERSION]->(v:DocumentVersion {status: 'current'})
  WHERE NOT d.doc_id IN $present
  RETURN count(v) AS current
}
CALL () {
  MATCH (d:Document {pack: $pack})-[o:OWNS]->(:RefKey) WHERE NOT d.doc_id IN $present
  RETURN count(o) AS owned
}
RETURN current + owned AS n
"""


def current_stamps(driver: neo4j.Driver, database: str, pack: str) -> list[tuple[str, object]]:
    """(version key, raw stamp text) of the pack's current document versions (a read)."""
    records, _, _ = driver.execute_query(_READ, pack=pack, database_=database, routing_=neo4j.RoutingControl.READ)
    return [(rec["key"], rec["stamps"]) for rec in records]


def write_stamps(driver: neo4j.Driver, database: str, rows: Sequence[dict[str, Any]]) -> None:
    """Set ``row.stamps`` on each pending or current version ``row.key``."""
    driver.execute_query(_WRITE, rows=list(rows), database_=database)


def lock_live(tx: neo4j.ManagedTransaction, keys: Sequence[str]) -> list[tuple[str, object]]:
    """Write-lock these pending or current versions for the rest of the transaction; (key, raw
    stamp text) of each (a key without such a version is left out)."""
    return [(rec["key"], rec["stamps"]) for rec in tx.run(_LOCK_LIVE, keys=list(keys))]


def set_stamps(tx: neo4j.ManagedTransaction, rows: Sequence[dict[str, Any]]) -> None:
    """Set ``row.stamps`` on version ``row.key``, in the caller's transaction."""
    tx.run(_SET, rows=list(rows)).consume()


def any_missing(driver: neo4j.Driver, database: str, pack: str, present: Sequence[str]) -> bool:
    """Whether a current document, or one owning keys, of ``pack`` is not in ``present`` (a read)."""
    records, _, _ = driver.execute_query(
        _MISSING, pack=pack, present=list(present), database_=database, routing_=neo4j.RoutingControl.READ
    )
    return bool(records and records[0]["n"])
