"""The vectors of each chunk's answerable units (``rag_engine.text.sentences``), made when the
chunk is indexed: the same embedder, the same embedding cache (by text hash), written with the
chunk's own vector in the same transaction, so staleness, blue/green re-index and cleanup cover
them as they cover the chunk.

Stored on the chunk as one byte array (``<index property>_units``: float16, little-endian, the
units' vectors one after another) with ``units_splitter`` (the splitter version): a chunk node
carries its units' evidence and nothing else has to be kept in step with it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rag_engine.providers.embedding_cache import EmbeddingCache, embed_batched
from rag_engine.store.units import UNITS_SUFFIX, encode
from rag_engine.text.sentences import SPLITTER_VERSION, embedded_units

log = logging.getLogger(__name__)


def units_property(vector_property: str) -> str:
    """The chunk property holding the unit vectors that go with ``vector_property``."""
    return vector_property + UNITS_SUFFIX


@dataclass(frozen=True)
class UnitVectors:
    """Per chunk (in input order) the properties to set, and what embedding them cost."""

    props: list[dict[str, object]]
    units: int
    cache_hits: int
    requests: int
    seconds: float

    def figures(self) -> dict[str, float | int]:
        return {
            "unit_vectors": self.units,
            "unit_embed_cache_hits": self.cache_hits,
            "unit_embed_requests": self.requests,
            "unit_embed_seconds": round(self.seconds, 3),
        }


def embed_units(
    chunks: Sequence[tuple[str, str]],
    embed: Callable[[list[str]], list[list[float]]],
    *,
    vector_property: str,
    identity: str,
    dimension: int,
    batch_size: int,
    cache: EmbeddingCache | None,
    label: str = "",
) -> UnitVectors:
    """The unit-vector properties of each (heading, text) chunk, embedded in batches."""
    started = time.perf_counter()
    per_chunk = [embedded_units(heading, text) for heading, text in chunks]
    flat = [t for texts in per_chunk for t in texts]
    result = embed_batched(flat, embed, identity=identity, dimension=dimension, batch_size=batch_size, cache=cache)
    prop = units_property(vector_property)
    props: list[dict[str, object]] = []
    at = 0
    for texts in per_chunk:
        vectors = result.vectors[at : at + len(texts)]
        at += len(texts)
        props.append({prop: encode(vectors, dimension), "units_splitter": SPLITTER_VERSION})
    seconds = time.perf_counter() - started
    if flat:
        log.info(
            "unit vectors %s: %d units of %d chunks (%d from cache, %d requests, %.1fs)",
            label,
            len(flat),
            len(chunks),
            result.cache_hits,
            result.requests,
            seconds,
        )
    return UnitVectors(props, len(flat), result.cache_hits, result.requests, seconds)
