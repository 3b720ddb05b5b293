"""The built-in embedder: signed feature hashing of words and word bigrams.

It needs no model download and no network, so the demo and CI run anywhere, and it is
deterministic across processes (hashlib, not Python's salted hash()). It is a lexical-semantic
baseline, not a neural model: configure an OpenAI-compatible embedder for real semantics.
"""

from __future__ import annotations

import hashlib
import itertools

import numpy as np

from rag_engine.providers.registry import ModelSpec
from rag_engine.text.analyzer import HASH_EMBEDDER


class HashEmbedder:
    """Embeds text into ``dimension`` floats, L2-normalized (cosine == dot product)."""

    def __init__(self, spec: ModelSpec):
        if spec.model.dimension is None:
            raise ValueError("hash embedder needs a dimension")
        self.spec = spec
        self.dimension = spec.model.dimension

    def _features(self, text: str) -> list[tuple[str, float]]:
        toks = HASH_EMBEDDER.terms(text)
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
