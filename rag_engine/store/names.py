"""Names of the store's indexes and properties, shared by the schema, the writers and the reads."""

from __future__ import annotations

VECTOR_INDEX = "chunk_embedding"
EMBEDDING_PROPERTY = "embedding"
"""Names of a database's first vector index and chunk property (and of an IndexMeta without them)."""
CHUNK_FULLTEXT = "chunk_text"
ENTITY_FULLTEXT = "entity_name"
GRAPH_EPOCH = "graph"
"""Name of the (:StoreEpoch) node graph writes bump (``epochs.bump_graph_epoch``)."""
