"""The xref eval's resolution run: a pack's own chunks and references, keys resolved by the engine's
rule (store/references.py, ``_RESOLVE_KEYS``) in pure Python: a CITES key resolves to every active chunk
answering to the same key, the citing chunk itself excluded. No Neo4j, no model."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from rag_engine.ingest.documents import discover, load_document
from rag_engine.packs import ChunkRecord, DomainPack, encode_local_id

OUTSIDE_TYPE = "outside"


@dataclass
class Resolution:
    chunks: dict[str, ChunkRecord]
    refs: dict[str, list[Any]]  # anchor -> ReferenceRecords
    answering: dict[str, list[str]]  # key -> anchors answering to it
    pairs: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    """(source anchor, target anchor) -> [(raw, key)] that produced it."""

    def citing_from(self, docs: Collection[str]) -> Resolution:
        """The same corpus with only the references cited from ``docs`` (targets anywhere): what a
        split of the gold, drawn by citing document, is scored against."""
        return Resolution(
            chunks=self.chunks,
            refs={a: v for a, v in self.refs.items() if doc_of(a) in docs},
            answering=self.answering,
            pairs={p: v for p, v in self.pairs.items() if doc_of(p[0]) in docs},
        )


def doc_of(anchor_: str) -> str:
    return anchor_.split("#", 1)[0]


def anchor(doc: str, passage: str) -> str:
    return f"{doc}#{encode_local_id(passage)}"


def resolve(pack: DomainPack, max_bytes: int) -> Resolution:
    """Chunk the corpus, extract references and resolve keys like the engine does."""
    chunks: dict[str, ChunkRecord] = {}
    for ref in discover(pack):
        doc = load_document(pack, ref.partition_key, max_bytes=max_bytes)
        for chunk in pack.chunk(doc):
            chunks[chunk.anchor] = chunk
    answering: dict[str, list[str]] = defaultdict(list)
    for anchor_, chunk in chunks.items():
        for key in chunk.keys:
            answering[key].append(anchor_)
    res = Resolution(chunks=chunks, refs={}, answering=dict(answering))
    for anchor_, chunk in chunks.items():
        records = pack.extract_references(chunk)
        res.refs[anchor_] = records
        for r in records:
            for target in res.answering.get(r.normalized, ()):
                if target != anchor_:
                    res.pairs.setdefault((anchor_, target), []).append((r.raw, r.normalized))
    return res
