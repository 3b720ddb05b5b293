"""Where the engine keeps its data: Neo4j, the usage ledger, artifacts and the embedding cache."""

from __future__ import annotations

from pydantic import Field, field_validator

from rag_engine.config.base import Frozen, _env_name


class Neo4jConfig(Frozen):
    uri_env: str = "NEO4J_URI"
    default_uri: str = "bolt://127.0.0.1:7687"
    user_env: str = "NEO4J_USER"
    password_env: str = "NEO4J_PASSWORD"
    database: str = "neo4j"
    write_batch_size: int = Field(500, ge=1, le=50_000)
    max_chunks_per_document: int = Field(10_000, ge=1, le=1_000_000)
    """A document version is written (and its old version switched off) in one transaction, so
    readers never see half of it; a version with more chunks is refused before it is embedded.
    10,000 short chunks took 6 s and fit the shipped Neo4j's 128 MiB transaction limit
    (``db.memory.transaction.max``); 30,000 did not. Raise both together."""
    connect_timeout_s: float = Field(5.0, gt=0, le=120)
    """Seconds to open a connection: a stopped Neo4j is reported after this, not after retries."""

    _names = field_validator("uri_env", "user_env", "password_env")(_env_name)


class LedgerConfig(Frozen):
    url_env: str = "RAG_LEDGER_URL"
    default_url: str = "sqlite:///var/ledger.sqlite"

    _names = field_validator("url_env")(_env_name)


class StorageConfig(Frozen):
    neo4j: Neo4jConfig = Neo4jConfig()
    ledger: LedgerConfig = LedgerConfig()
    artifacts_dir: str = "var/artifacts"
    embedding_cache: str | None = "var/embedding_cache.sqlite"
    """SQLite file of passage embeddings keyed by (embedder identity, sha256 of the text), so a
    re-ingest of unchanged chunks makes no embedding call; None turns the cache off."""
    embedding_cache_env: str = "RAG_EMBEDDING_CACHE"
    """NAME of an environment variable that, when set, replaces ``embedding_cache`` (``make eval``
    points it under the eval's own directory, so no vector from a demo or a test enters an eval)."""

    _cache_env = field_validator("embedding_cache_env")(_env_name)
