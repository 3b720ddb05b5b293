"""The knowledge graph in Neo4j: its schema, what writes it and what reads it at query time.

- ``schema``: constraints and indexes; ``writer``: document versions, chunks, citations,
  embeddings, graph records, withdrawal (all Cypher writes)
- ``extraction`` / ``models`` / ``entity_resolution`` / ``extraction_cache``: LLM graph
  extraction validated into pydantic records with provenance
- ``planner`` / ``traversal``: query-time plans and bounded traversal
- ``quality`` / ``cleanup`` / ``feedback``: nightly checks, approved cleanup, reader feedback
"""
