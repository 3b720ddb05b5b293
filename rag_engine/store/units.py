"""How unit vectors (``ingest.unit_vectors``) are stored on a chunk: the property beside the active
index's vector property, float16 bytes. The query path reads them with its top candidates
(``store.top_reads``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

UNITS_SUFFIX = "_units"
DTYPE = "<f2"
"""Unit vectors are stored as float16, little-endian, one after another (a byte array property)."""


def encode(vectors: Sequence[Sequence[float]], dimension: int) -> bytes:
    if not vectors:
        return b""
    return np.asarray(vectors, dtype=DTYPE).reshape(len(vectors), dimension).tobytes()


def decode(blob: bytes | None, dimension: int) -> np.ndarray:
    """(units, dimension) float32 array; empty when there is nothing usable."""
    if not blob or dimension <= 0 or len(blob) % (2 * dimension):
        return np.zeros((0, max(dimension, 1)), dtype=np.float32)
    return np.frombuffer(blob, dtype=DTYPE).reshape(-1, dimension).astype(np.float32)
