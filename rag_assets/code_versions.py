"""Asset code versions: the pure function lives in the engine (`rag ingest` change detection
uses it too); re-exported here for the assets."""

from rag_engine.ingest.code_versions import code_versions, pack_rules

__all__ = ["code_versions", "pack_rules"]
