"""Throwaway packs for tests: a shipped pack's rules over a temporary corpus, under a unique
pack name so their chunks, keys and reference edges never meet any other test's."""

from __future__ import annotations

from pathlib import Path

from rag_engine.engine import Engine
from rag_engine.packs import DomainPack, load_pack

POLICY = """---
id: POL-900
collection: kb_internal
---
# Laptop policy

## Scope
Every company laptop is encrypted. See RB-77 for the lost device runbook.

## Lost devices
Report a lost laptop within one hour, as the runbook RB-77 describes.
"""

RUNBOOK = """---
id: RB-77
collection: kb_internal
---
# Lost device runbook

## Steps
Lock the device remotely, rotate credentials and file a ticket referencing POL-900.
"""


def temp_pack(
    engine: Engine, name: str, corpus: Path, files: dict[str, str | bytes], base: str = "company_x_kb"
) -> DomainPack:
    corpus.mkdir(parents=True, exist_ok=True)
    for filename, content in files.items():
        target = corpus / filename
        if isinstance(content, bytes):
            target.write_bytes(content)
        else:
            target.write_text(content, encoding="utf-8")
    entry = engine.cfg.pack(base).model_copy(update={"name": name, "corpus": str(corpus)})
    return load_pack(entry, engine.root)


def graph_counts(engine: Engine, pack: str) -> dict[str, int]:
    records, _, _ = engine.driver.execute_query(
        """
        MATCH (c:Chunk {pack: $pack})
        OPTIONAL MATCH (c)-[r]-()
        WITH count(DISTINCT c) AS chunks, count(DISTINCT r) AS rels
        MATCH (d:Document {pack: $pack})-[:HAS_VERSION]->(v:DocumentVersion)
        RETURN chunks, rels, count(DISTINCT d) AS documents, count(DISTINCT v) AS versions
        """,
        pack=pack,
        database_=engine.database,
    )
    return dict(records[0])


def extraction_cassette(engine: Engine, pack: DomainPack, path: Path) -> None:
    """Append a recorded (empty) extraction answer for every chunk of the pack's corpus as it is
    now to the replay cassette at ``path``: the demo cassette holds none for a throwaway pack, so
    its extraction calls would fail and nothing would be cached."""
    import json

    from rag_engine.graph.extraction import build_messages
    from rag_engine.graph.models import RawExtraction
    from rag_engine.ingest.documents import discover, load_document
    from rag_engine.providers.replay import Cassette
    from rag_engine.providers.results import CHARACTER_ESTIMATE, TokenUsage

    served = engine.registry.extraction.model.served_model
    cassette = Cassette(path)
    for ref in discover(pack):
        for chunk in pack.chunk(load_document(pack, ref.partition_key, max_bytes=engine.cfg.max_document_bytes)):
            answer = json.dumps({"entities": [], "relationships": []})
            messages = build_messages(pack.manifest, chunk)
            usage = TokenUsage(input_tokens=400 + len(chunk.text) // 4, output_tokens=20, estimate=CHARACTER_ESTIMATE)
            cassette.put_generation(served, messages, answer, schema=RawExtraction, usage=usage)
