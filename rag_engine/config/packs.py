"""Domain pack entries and the live SQL sources they may query at retrieval time."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from rag_engine.config.base import Frozen, _env_name

SQL_NAME = r"^[a-z_][a-z0-9_]{0,62}$"
"""A lowercase SQL identifier: the only table and column names a live source may name."""


class LiveSourceConfig(Frozen):
    """A SQL table queried at retrieval time for one of the pack's collections (rag_engine/
    retrieval/live_source.py): read-only transactions, bound parameters, a row cap, a timeout.
    Identifiers are checked here and quoted by SQLAlchemy; the question only ever goes in bind
    parameters. The URL is read from the environment variable ``url_env`` (a NAME, never the URL)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]{0,62}$")
    url_env: str
    """NAME of the environment variable holding the SQLAlchemy URL (postgresql+psycopg2://...),
    ideally of a role granted SELECT only."""
    collection: str
    """The pack collection its rows belong to: the policy gate decides on it before any query."""
    table: str = Field(pattern=r"^([a-z_][a-z0-9_]{0,62}\.)?[a-z_][a-z0-9_]{0,62}$")
    """``table`` or ``schema.table``."""
    key_column: str = Field(pattern=SQL_NAME)
    text_column: str = Field(pattern=SQL_NAME)
    committed_at_column: str = Field(pattern=SQL_NAME)
    """When the row was committed (timestamptz; a naive timestamp is read as UTC)."""
    heading_column: str | None = Field(None, pattern=SQL_NAME)
    match: Literal["fulltext", "ilike"] = "fulltext"
    """``fulltext``: to_tsvector(text_search_config, text) @@ any of the question's terms, ranked
    by ts_rank_cd; ``ilike``: rows holding any term, ranked by how many they hold."""
    text_search_config: str = Field("english", pattern=SQL_NAME)
    row_cap: int = Field(20, ge=1, le=1000)
    freshness_window_ms: int = Field(ge=1)
    """Lag (now - newest committed_at of the rows used) beyond this: a ``freshness_breach``
    event and the candidates marked stale (the answer is still given)."""
    timeout_ms: int = Field(2000, ge=100, le=60_000)
    """Statement timeout and (rounded up to whole seconds) connect timeout."""

    _names = field_validator("url_env")(_env_name)


class PackEntry(Frozen):
    """How to find and trust a domain pack; the pack's own rules live in its manifest."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    enabled: bool = True
    path: str
    module: str
    factory: str = "build_pack"
    manifest: str
    fixtures: str
    corpus: str
    domain: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    version: str
    reference_types: tuple[str, ...]
    languages: tuple[str, ...]
    collections: tuple[str, ...]
    extraction: bool = True
    """LLM graph extraction for this pack. False: ``llm_extraction`` records the pack as disabled,
    calls no model, and ``graph_writes`` removes any inferred records it wrote before (a pack of
    plain passages, or one with no cassette or model budget yet, still gets references and retrieval)."""
    max_confidence: float = Field(1.0, ge=0, le=1)
    """Ceiling on the confidence of this pack's inferred edges: a model's confidence is its claim
    (a chunk can tell it to say 1.0); applied when the graph is written (a rebuild, no model call)."""
    live_sources: tuple[LiveSourceConfig, ...] = ()
    """SQL tables queried at retrieval time for this pack's collections (the ``live`` leg)."""

    @model_validator(mode="after")
    def _live_sources_serve_pack_collections(self) -> PackEntry:
        for source in self.live_sources:
            if source.collection not in self.collections:
                raise ValueError(
                    f"live source {source.name!r}: collection {source.collection!r} is not one of "
                    f"the pack's collections {list(self.collections)}"
                )
        return self
