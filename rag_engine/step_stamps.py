"""Change detection for `rag ingest`: which steps of a document version are already done.

A partition key carries the document's content hash, so "same content, same step code" is "same
partition key, same code version". Per (pack, partition, step) the code version of the last
successful run is stored on the partition's (:DocumentVersion) node (``step_versions``, a JSON
object), not in the artifacts dir: a stamp then lives and dies with what it vouches for. A wiped
store, a version that never went live (failed index) or one superseded and later restored by a
revert has no valid stamp, so its steps run again. Only ``current`` versions are read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import neo4j

from rag_engine.graph.writer import version_key

_READ = """
MATCH (d:Document {pack: $pack})-[:HAS_VERSION]->(v:DocumentVersion {status: 'current'})
RETURN v.key AS key, v.step_versions AS stamps
"""

_WRITE = """
UNWIND $rows AS row
MATCH (v:DocumentVersion {key: row.key}) WHERE v.status = 'current'
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


def read_stamps(driver: neo4j.Driver, database: str, pack: str) -> dict[str, dict[str, str]]:
    """partition key -> {step: code version} for the pack's current document versions."""
    records, _, _ = driver.execute_query(_READ, pack=pack, database_=database, routing_=neo4j.RoutingControl.READ)
    prefix = version_key(pack, "")
    out: dict[str, dict[str, str]] = {}
    for rec in records:
        try:
            stamps = json.loads(rec["stamps"]) if rec["stamps"] else {}
        except (TypeError, ValueError):  # unreadable stamp: no stamp, the steps run again
            stamps = {}
        out[rec["key"][len(prefix) :]] = stamps if isinstance(stamps, dict) else {}
    return out


def write_stamps(driver: neo4j.Driver, database: str, pack: str, stamps: Mapping[str, Mapping[str, str]]) -> int:
    """Store the stamps of the given partitions (only current versions take them); no call when empty."""
    rows = [
        {"key": version_key(pack, key), "stamps": json.dumps(dict(sorted(s.items())), sort_keys=True)}
        for key, s in stamps.items()
    ]
    if not rows:
        return 0
    driver.execute_query(_WRITE, rows=rows, database_=database)
    return len(rows)


def any_missing(driver: neo4j.Driver, database: str, pack: str, present: list[str]) -> bool:
    """Whether a current document, or one owning keys, is no longer in the corpus (read-only, so a
    no-change run writes nothing)."""
    records, _, _ = driver.execute_query(
        _MISSING, pack=pack, present=present, database_=database, routing_=neo4j.RoutingControl.READ
    )
    return bool(records and records[0]["n"])
