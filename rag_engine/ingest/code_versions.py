"""Step code versions derived from config slices, so rule changes become staleness.

Shared by the Dagster assets (code_version) and `rag ingest` change detection (a partition whose
step code version equals the one of its last successful write is skipped), hence in the engine.

pack rules / normalizer / manifest / reference types / languages -> chunks, references (and
LLM extraction): re-extraction + eval. Target resolution / traversal policy -> graph only.
Embedder identity -> the chunk index: a full re-index.
"""

from __future__ import annotations

from rag_engine.config import slice_hash
from rag_engine.engine import Engine
from rag_engine.graph.extraction import prompt_hash
from rag_engine.packs import DomainPack
from rag_engine.text.sentences import SPLITTER_VERSION


def pack_rules(pack: DomainPack) -> str:
    m = pack.manifest
    return slice_hash(
        m.version, m.rules_version, m.normalizer_version, m.reference_types, m.languages, pack.rules_fingerprint()
    )


def code_versions(engine: Engine, pack: DomainPack) -> dict[str, str]:
    cfg = engine.cfg
    rules = pack_rules(pack)
    return {
        "source_documents": slice_hash("source-v1", cfg.max_document_bytes),
        "chunks": slice_hash("chunks-v1", rules, cfg.retrieval.min_chunk_words),
        "references": slice_hash("references-v1", rules),
        "chunk_index": slice_hash(
            "index-v1",
            engine.embedder_identity,
            engine.registry.embedding.model.dimension,
            *(["units", SPLITTER_VERSION] if engine.cfg.retrieval.evidence.index_units else []),
        ),
        "llm_extraction": slice_hash(
            "extraction-v1",
            rules,
            prompt_hash(pack.manifest),
            engine.registry.extraction.identity,
            cfg.budgets.batch_size,
            pack.entry.extraction,
        ),
        "graph_writes": slice_hash(
            "graph-v1",
            cfg.graph.target_resolution_version,
            cfg.graph.confidence_floor,
            cfg.graph.confidence_buckets,
            cfg.traversal.policy_version,
            cfg.traversal.confidence_floor,
            pack.entry.max_confidence,
            pack.entry.extraction,
        ),
    }
