"""What makes an embedding usable: the configured dimension, finite values, not all zeros.

A cosine vector index silently leaves out a zero vector and Neo4j refuses a NaN in a query, so
a vector failing these checks is refused where it enters the engine (``ModelClient.embed``,
the OpenAI backend before a cassette records it) and where it is read back (the embedding
cache), never cached, written or searched with.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rag_engine.errors import EmbeddingInvalid


def vector_problem(vector: Sequence[float], dimension: int | None) -> str | None:
    """Why ``vector`` cannot be indexed (``dimension`` None: any), or None when it can."""
    try:
        arr = np.asarray(vector, dtype=np.float64)
    except (TypeError, ValueError):
        return "not a list of numbers"
    if arr.ndim != 1 or arr.size == 0:
        return "empty or not flat"
    if dimension is not None and arr.size != dimension:
        return f"dimension {arr.size}, not the configured {dimension}"
    if not np.isfinite(arr).all():
        return "not finite (NaN or infinity)"
    if not arr.any():
        return "all zeros"
    return None


def check_vectors(vectors: Sequence[Sequence[float]], dimension: int | None, *, who: str) -> None:
    """Raise ``EmbeddingInvalid`` naming the first unusable vector of an answer and how many are."""
    problems = [(i, p) for i, v in enumerate(vectors) if (p := vector_problem(v, dimension)) is not None]
    if problems:
        first, why = problems[0]
        raise EmbeddingInvalid(
            f"{who} answered {len(problems)} of {len(vectors)} embedding(s) unusable (vector {first}: {why})"
        )
