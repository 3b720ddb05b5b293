"""Graph quality report: what is wrong with the graph, counted, per set of packs. Read-only.

orphan_entities        entities no current chunk mentions any more
dangling_edges         inferred edges whose evidence chunk is gone or not current, and
                       reference edges touching a chunk that is not current
stale_versions         superseded document versions that still hold chunk nodes
missing_provenance     inferred edges or mentions lacking any provenance field
key_conflicts          owned reference keys (a document's id) owned by more than one document, or
                       answered by an active chunk of another document: citations of the key
                       would link to a document that is not the one it names
low_confidence         inferred edges stored but not retrieval-eligible (expected, reported)
graph_size             deterministic (REFERENCES) vs inferred (RELATED) edge counts, eligible
                       edges, documents, active chunks, entities
latest_run             the most recent (:ExtractionRun)
cleanup                the most recent approved (:Cleanup)
"""

from __future__ import annotations

from typing import Any

import neo4j

from rag_engine.store.graph_quality import quality_counts


def quality_report(driver: neo4j.Driver, database: str, packs: list[str]) -> dict[str, Any]:
    found = quality_counts(driver, database, packs)
    orphans, dangling, dangling_refs = found["orphans"], found["dangling"], found["dangling_refs"]
    stale, missing, conflicts, conf = found["stale"], found["missing"], found["conflicts"], found["conf"]
    deterministic, sizes = found["deterministic"], found["sizes"]
    return {
        "packs": packs,
        "orphan_entities": {"count": orphans["n"], "sample": orphans["sample"]},
        "dangling_edges": {
            "count": dangling["n"] + dangling_refs["n"],
            "inferred": dangling["n"],
            "references": dangling_refs["n"],
            "sample": dangling["sample"],
        },
        "stale_versions": {
            "count": int(stale["n"] or 0),
            "superseded": int(stale["superseded"] or 0),
            "chunks": int(stale["chunks"] or 0),
        },
        "missing_provenance": {"count": missing["n"]},
        "key_conflicts": {
            "count": conflicts["n"],
            "sample": [
                {**c, "owners": sorted(c["owners"]), "others": sorted(c["others"])} for c in conflicts["sample"]
            ],
        },
        "low_confidence": {"count": int(conf["low_confidence"] or 0), "eligible": int(conf["eligible"] or 0)},
        "graph_size": {
            "deterministic": deterministic["n"],
            "inferred": int(conf["inferred"] or 0),
            "eligible": int(conf["eligible"] or 0),
            **sizes,
        },
        "latest_run": found["latest"],
        "cleanup": found["cleanup"],
    }
