"""Cypher of the graph quality report (``graph.quality`` shapes the report): each count in its
own managed read transaction, over the packs passed as ``$packs``. Read-only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import neo4j

from rag_engine.store.cleanup import STALE
from rag_engine.store.quality_predicates import PROVENANCE_FIELDS
from rag_engine.store.session import read

_STALE_VERSIONS = """
MATCH (d:Document)-[:HAS_VERSION]->(v:DocumentVersion {status: 'superseded'}) WHERE d.pack IN $packs
OPTIONAL MATCH (v)-[:HAS_CHUNK]->(c:Chunk)
WITH v, count(c) AS chunks
RETURN count(v) AS superseded, sum(CASE WHEN chunks > 0 THEN 1 ELSE 0 END) AS n, sum(chunks) AS chunks
"""

_MISSING_PROVENANCE = """
MATCH (a:Entity)-[r:RELATED|MENTIONED_IN]->() WHERE coalesce(r.pack, a.pack) IN $packs
AND any(f IN $fields WHERE r[f] IS NULL)
RETURN count(r) AS n
"""

_KEY_CONFLICTS = """
MATCH (d:Document)-[:OWNS]->(k:RefKey) WHERE d.pack IN $packs
WITH d.pack AS pack, k, collect(DISTINCT d.doc_id) AS owners
OPTIONAL MATCH (k)<-[:ANSWERS_TO]-(c:Chunk {active: true}) WHERE c.pack = pack AND NOT c.doc_id IN owners
WITH pack, k, owners, collect(DISTINCT c.doc_id) AS others
WHERE size(owners) > 1 OR size(others) > 0
WITH pack, k, owners, others ORDER BY pack, k.key
RETURN count(k) AS n,
       collect({pack: pack, key: substring(k.key, size(pack) + 1), owners: owners, others: others})[..10] AS sample
"""

_CONFIDENCE = """
MATCH (:Entity)-[r:RELATED]->(:Entity) WHERE r.pack IN $packs
RETURN count(r) AS inferred,
       sum(CASE WHEN r.retrieval_eligible THEN 0 ELSE 1 END) AS low_confidence,
       sum(CASE WHEN r.retrieval_eligible THEN 1 ELSE 0 END) AS eligible
"""

_DETERMINISTIC = """
MATCH (s:Chunk)-[e:REFERENCES]->(:Chunk) WHERE s.pack IN $packs RETURN count(e) AS n
"""

_SIZES = """
CALL () { MATCH (d:Document) WHERE d.pack IN $packs RETURN count(d) AS documents }
CALL () { MATCH (c:Chunk) WHERE c.pack IN $packs AND c.active RETURN count(c) AS chunks }
CALL () { MATCH (e:Entity) WHERE e.pack IN $packs RETURN count(e) AS entities }
RETURN documents, chunks, entities
"""

_LATEST_RUN = """
MATCH (r:ExtractionRun) WHERE r.pack IN $packs
RETURN r.run_id AS run_id, r.pack AS pack, r.status AS status, r.chunks AS llm_calls, r.cache_hits AS cache_hits,
       toString(r.finished_at) AS finished_at
ORDER BY r.finished_at DESC LIMIT 1
"""

_LATEST_CLEANUP = """
MATCH (c:Cleanup) WHERE any(p IN c.packs WHERE p IN $packs)
RETURN c.run_id AS run_id, c.approved_by AS approved_by, c.reason AS reason, c.removed AS removed,
       toString(c.at) AS at
ORDER BY c.at DESC LIMIT 1
"""


_ORPHANS = f"{STALE['orphan_entities'][0]} RETURN count(x) AS n, collect(x.name)[..10] AS sample"
_DANGLING_INFERRED = f"{STALE['dangling_inferred_edges'][0]} RETURN count(x) AS n, collect(x.chunk_id)[..10] AS sample"
_DANGLING_REFERENCES = f"{STALE['dangling_reference_edges'][0]} RETURN count(x) AS n"


def quality_counts(driver: neo4j.Driver, database: str, packs: Sequence[str]) -> dict[str, Any]:
    """Every figure of the report as the store returns it: one row per count (``latest_run`` and
    ``cleanup``: the row, or None when there is none)."""
    p = {"packs": list(packs)}
    latest = read(driver, database, _LATEST_RUN, **p)
    cleanup = read(driver, database, _LATEST_CLEANUP, **p)
    return {
        "orphans": read(driver, database, _ORPHANS, **p)[0],
        "dangling": read(driver, database, _DANGLING_INFERRED, **p)[0],
        "dangling_refs": read(driver, database, _DANGLING_REFERENCES, **p)[0],
        "stale": read(driver, database, _STALE_VERSIONS, **p)[0],
        "missing": read(driver, database, _MISSING_PROVENANCE, fields=list(PROVENANCE_FIELDS), **p)[0],
        "conflicts": read(driver, database, _KEY_CONFLICTS, **p)[0],
        "conf": read(driver, database, _CONFIDENCE, **p)[0],
        "deterministic": read(driver, database, _DETERMINISTIC, **p)[0],
        "sizes": read(driver, database, _SIZES, **p)[0],
        "latest": latest[0] if latest else None,
        "cleanup": cleanup[0] if cleanup else None,
    }
