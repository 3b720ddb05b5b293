"""Throwaway packs for tests: a shipped pack's rules over a temporary corpus, under a unique
pack name so their chunks, keys and reference edges never meet any other test's."""

from __future__ import annotations

from pathlib import Path

from rag_engine.engine import Engine
from rag_engine.packs import DomainPack, load_pack


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
