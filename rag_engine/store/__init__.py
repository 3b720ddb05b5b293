"""The Neo4j store layer that ``graph/`` and ``retrieval/`` both stand on.

- ``names``: index and property names of the schema
- ``session``: read transactions, one per question (``read_transaction``), and the one-off ``read``
- ``epochs``: store epochs (re-index, graph writes) and the per-process caches keyed by them
- ``reads``: the query path's reads (fulltext, vector, reference keys, expansion, chunks)
- ``top_reads``: the query path's one read after fusion (titles, sentence evidence, what the top cites)
- ``connection``: the Neo4j target and driver (``open_driver``)
- ``artifacts``: per-partition JSON artifacts passed between pipeline steps
- ``partition_keys``: the document-version partition key, checked before any path is built from it
- ``live_sql``: pooled read-only connections to the live SQL sources packs declare
"""
