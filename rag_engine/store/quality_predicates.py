"""What makes an inferred edge fit to traverse, once: the quality report counts the edges that
fail it, cleanup plans their removal, and traversal never follows them.

An inferred ``RELATED`` edge ``r`` is traversable when it has every provenance field
(``PROVENANCE_FIELDS``: where it was extracted from, by which run, model and prompt) and its
evidence chunk exists, is current, is of an enabled pack and in a permitted collection (the
``$packs`` and ``$collections`` parameters). An edge without provenance cannot be explained, a
dangling one has no evidence left to show: neither is a path.
"""

from __future__ import annotations

PROVENANCE_FIELDS = (
    "pack",
    "doc_id",
    "chunk_id",
    "doc_version",
    "confidence_bucket",
    "extraction_run_id",
    "model",
    "prompt_hash",
    "source_type",
)
"""Fields every inferred edge and mention carries (``store.inferred``); a record missing one has no provenance."""

_FIELD_LIST = "[" + ", ".join(f"'{f}'" for f in PROVENANCE_FIELDS) + "]"


def has_provenance(var: str) -> str:
    """Cypher: the relationship ``var`` carries every provenance field."""
    return f"all(f IN {_FIELD_LIST} WHERE {var}[f] IS NOT NULL)"


def lacks_provenance(var: str) -> str:
    """Cypher: the relationship ``var`` misses at least one provenance field."""
    return f"any(f IN {_FIELD_LIST} WHERE {var}[f] IS NULL)"


def traversable(var: str = "r") -> str:
    """Cypher: the inferred edge ``var`` may be traversed (see the module docstring); the evidence
    chunk is matched as ``ev``."""
    return (
        f"{var}.retrieval_eligible AND {var}.confidence >= $floor AND {var}.source_type = 'llm_inferred_graph' "
        f"AND {has_provenance(var)} "
        f"AND EXISTS {{ MATCH (ev:Chunk {{chunk_id: {var}.chunk_id}}) "
        f"WHERE ev.active AND ev.pack IN $packs AND ev.pack = {var}.pack AND ev.collection IN $collections }}"
    )
