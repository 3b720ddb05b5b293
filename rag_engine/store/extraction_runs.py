"""Cypher of the (:ExtractionRun) records a pack's extraction leaves (written by
``store.inferred.write_extraction_run``): how many a pack has, and their ids. Reads only.
"""

from __future__ import annotations

from collections.abc import Sequence

import neo4j

from rag_engine.store.session import read

_COUNT = "MATCH (r:ExtractionRun) WHERE r.pack = $pack RETURN count(r) AS n"
_IDS = "MATCH (r:ExtractionRun) WHERE r.pack IN $packs RETURN r.run_id AS run_id"


def run_count(driver: neo4j.Driver, database: str, pack: str) -> int:
    """How many extraction runs of ``pack`` the store records (0: its first run is still to come)."""
    rows = read(driver, database, _COUNT, pack=pack)
    return int(rows[0]["n"]) if rows else 0


def run_ids(driver: neo4j.Driver, database: str, packs: Sequence[str]) -> set[str]:
    """The ids of the extraction runs of these packs."""
    return {r["run_id"] for r in read(driver, database, _IDS, packs=list(packs))}
