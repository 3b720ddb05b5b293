"""The offline pipeline, without Dagster: one document version at a time.

- ``documents``: discovery of a pack's corpus files and document-version partition keys
- ``runner``: running one step over a run's partitions (one document's failure stays its own)
- ``steps``: source, chunks, references, chunk index, graph writes
- ``extraction_step``: the LLM graph extraction step, with its run budget and cache
- ``stamps``: per-partition step stamps (what ran, at which code version)
- ``code_versions``: step code versions derived from config slices (rule changes become staleness)
- ``pipeline``: ``ingest_pack``, every step in order in one process (``rag ingest``)
- ``reindex``: a re-index under a new embedder beside the live one, cut over on approval
- ``embed_progress``: progress lines of long embedding work
"""
