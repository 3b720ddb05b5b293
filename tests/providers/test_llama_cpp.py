"""The local inference sidecar on llama.cpp's own endpoints (provider kind ``llama_cpp``), against a
loopback server speaking that wire format: every request capped in output tokens and in time out of
the question's budget, the rerank endpoint selectable by config beside the chat-prompt rerank, the
context limit enforced at the provider boundary, one definition of a present credential."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from rag_engine.config import LocalInferenceConfig, ModelConfig, ProviderConfig, load_config
from rag_engine.errors import ContextLimitExceeded, MissingCredential
from rag_engine.providers.clients import build_client
from rag_engine.providers.ledger import UsageLedger
from rag_engine.providers.registry import ModelSpec, ProviderRegistry, credential_present
from rag_engine.retrieval.candidates import Candidate
from rag_engine.retrieval.local_inference import expand_query, rerank
from tests.support.fake_llama_cpp import FakeLlamaCpp

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def llama():
    with FakeLlamaCpp() as srv:
        yield srv


def _spec(url: str, *, role: str = "generation", caps=("generation", "query_expansion", "rerank"), context=8192):
    provider = ProviderConfig(name="sidecar", kind="llama_cpp", endpoint=url, timeout_s=30)
    model = ModelConfig(
        name="side", provider="sidecar", role=role, served_model="side-model", capabilities=caps, context_limit=context
    )
    return ModelSpec(model=model, provider=provider)


@pytest.fixture
def ledger(tmp_path):
    led = UsageLedger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    yield led
    led.dispose()


def _candidates(n: int) -> list[Candidate]:
    return [
        Candidate(
            chunk_id=f"p:doc#c{i}",
            anchor=f"doc#c{i}",
            doc_id="doc",
            heading=f"H{i}",
            text=f"passage number {i}",
            collection="kb",
            score=1.0 / (i + 1),
            sources=("lexical",),
        )
        for i in range(n)
    ]


def test_completion_sends_llama_cpp_native_request_with_an_output_and_time_cap(llama, ledger):
    client = build_client(_spec(llama.url + "/v1"), ledger=ledger, root=ROOT)
    events: list[dict] = []
    out = expand_query(client, "lost laptop", events=events, limits=LocalInferenceConfig(question_budget_s=4))
    assert out == "lost laptop other words"
    ((path, body),) = llama.requests
    assert path == "/completion"  # the server's own route, not the OpenAI one (a /v1 endpoint works too)
    assert body["n_predict"] == 256 and isinstance(body["prompt"], str) and "lost laptop" in body["prompt"]
    assert 0 < body["t_max_predict_ms"] <= 0.3 * 4000  # the expansion's share of the question's budget
    (rec,) = ledger.records()
    assert rec.purpose == "query_expansion" and rec.output_tokens > 0 and rec.status == "ok"


def test_rerank_endpoint_scores_every_candidate_and_orders_by_score(llama, ledger):
    scorer = build_client(_spec(llama.url, role="rerank", caps=("rerank",)), ledger=ledger, root=ROOT)
    llama.scores = lambda body: [float(len(d)) if "2" in d else 0.0 for d in body["documents"]]
    cands = _candidates(4)
    cands[3] = cands[3].model_copy(update={"exact": True})
    events: list[dict] = []
    limits = LocalInferenceConfig(rerank_method="endpoint")
    ranked = rerank(None, "q", cands, events=events, limits=limits, scorer=scorer)
    # the exact hit stays first; then c2 (the only scored one), then the fused order
    assert [c.chunk_id for c in ranked] == ["p:doc#c3", "p:doc#c2", "p:doc#c0", "p:doc#c1"]
    ((path, body),) = llama.requests
    assert path == "/rerank" and body["query"] == "q" and len(body["documents"]) == 4 and body["top_n"] == 4
    assert events[-1]["method"] == "endpoint" and events[-1]["changed"]
    (rec,) = ledger.records()
    assert rec.purpose == "rerank" and rec.input_tokens == 28


def test_chat_prompt_rerank_is_capped_in_output_tokens(llama, ledger):
    """The finding: no output cap on rerank, a small model repeated "20" until 120 s passed."""
    client = build_client(_spec(llama.url), ledger=ledger, root=ROOT)
    cands = _candidates(5)
    llama.content = lambda body: '{"order": [' + ", ".join(f'"{c.chunk_id}"' for c in reversed(cands)) + "]}"
    events: list[dict] = []
    ranked = rerank(client, "q", cands, events=events)
    assert [c.chunk_id for c in ranked] == [c.chunk_id for c in reversed(cands)]
    ((_, body),) = llama.requests
    assert body["n_predict"] == 32 + 24 * 5  # a few tokens per id to repeat, never unbounded


def test_a_slow_rerank_never_outlives_the_question_budget(llama, ledger):
    client = build_client(_spec(llama.url), ledger=ledger, root=ROOT)
    llama.delay_s = 3.0
    events: list[dict] = []
    started = time.perf_counter()
    ranked = rerank(client, "q", _candidates(3), events=events, limits=LocalInferenceConfig(question_budget_s=1.0))
    took = time.perf_counter() - started
    assert [c.chunk_id for c in ranked] == [c.chunk_id for c in _candidates(3)]  # fused order kept
    assert events[-1]["event"] == "local_inference_degraded" and events[-1]["error_type"] == "ProviderTimeout"
    assert took < 2.0, took  # the question's budget (1 s), not the provider's 30 s
    # a question whose budget is already spent does not call at all
    llama.requests.clear()
    rerank(client, "q", _candidates(3), events=events, started=time.perf_counter() - 60)
    assert events[-1] == {"event": "local_inference_skipped", "step": "rerank", "reason": "question_budget_spent"}
    assert llama.requests == []


def test_context_limit_is_enforced_at_the_provider_boundary(llama, ledger):
    client = build_client(_spec(llama.url, context=256), ledger=ledger, root=ROOT)
    prompt = "word " * 1584  # about 1,980 tokens at four characters a token
    with pytest.raises(ContextLimitExceeded):
        client.generate([{"role": "user", "content": prompt}], purpose="answer", max_tokens=64)
    assert llama.requests == []  # never sent


def test_an_empty_credential_is_absent_everywhere(tmp_path):
    cfg = load_config(ROOT / "config" / "engine.yaml")
    providers = tuple(
        p.model_copy(update={"enabled": True, "credential_env": "OPENAI_API_KEY"}) if p.name == "openai" else p
        for p in cfg.providers
    )
    cfg = cfg.model_copy(update={"providers": providers})
    assert not credential_present({"OPENAI_API_KEY": ""}, "OPENAI_API_KEY")
    assert not credential_present({"OPENAI_API_KEY": "  "}, "OPENAI_API_KEY")
    with pytest.raises(MissingCredential):  # the startup check (was: set to "" passed as present)
        ProviderRegistry(cfg, {"OPENAI_API_KEY": ""})
    status = ProviderRegistry(cfg, {"OPENAI_API_KEY": "x"}).credential_status()
    assert status["openai"] == "OPENAI_API_KEY: present"
