"""The built-in embedder: signed feature hashing of words and word bigrams.

It needs no model download and no network, so the demo and CI run anywhere, and it is
deterministic across processes (hashlib, not Python's salted hash()). It is a lexical-semantic
baseline, not a neural model: configure an OpenAI-compatible embedder for real semantics.
"""

from __future__ import annotations

import hashlib
import itertools
import re

import numpy as np

from rag_engine.providers.registry import ModelSpec

_TOKEN = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "has",
        "have",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "this",
        "to",
        "was",
        "were",
        "will",
        "with",
        "shall",
        "which",
        "such",
        "any",
        "may",
        "be",
        "been",
        "not",
    ]
)


def tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in _STOP]


def _stem(tok: str) -> str:
    """A tiny suffix stripper so 'erasure'/'erase', 'processing'/'processed' share features."""
    for suffix in ("ations", "ation", "ings", "ing", "ures", "ure", "ies", "ed", "es", "s", "e"):
        if len(tok) > len(suffix) + 3 and tok.endswith(suffix):
            return tok[: -len(suffix)]
    return tok


class HashEmbedder:
    """Embeds text into ``dimension`` floats, L2-normalized (cosine == dot product)."""

    def __init__(self, spec: ModelSpec):
        if spec.model.dimension is None:
            raise ValueError("hash embedder needs a dimension")
        self.spec = spec
        self.dimension = spec.model.dimension

    def _features(self, text: str) -> list[tuple[str, float]]:
        toks = [_stem(t) for t in tokens(text)]
        feats = [(t, 1.0) for t in toks]
        feats += [(f"{a}_{b}", 0.5) for a, b in itertools.pairwise(toks)]
        return feats

    def embed_one(self, text: str) -> list[float]:
        vec = np.zeros(self.dimension, dtype=np.float32)
        for feat, weight in self._features(text):
            digest = hashlib.blake2b(feat.encode(), digest_size=8).digest()
            h = int.from_bytes(digest, "little")
            vec[h % self.dimension] += weight if (h >> 63) & 1 else -weight
        # sublinear term frequency keeps long chunks from dominating
        vec = np.sign(vec) * np.log1p(np.abs(vec))
        norm = float(np.linalg.norm(vec))
        if norm > 0:
            vec /= norm
        return vec.tolist()

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_one(t) for t in texts]
