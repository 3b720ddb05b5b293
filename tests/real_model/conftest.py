"""The real-model lane: a real LLM server (tools/llm-local, SmolLM2-135M-Instruct on llama.cpp)
behind the engine's ``local_smollm`` provider.

Runs only where RAG_LLM_ENDPOINT names the server: `make test-real-model` installs and starts it
on a port of its own, sets the variable and RAG_REAL_MODEL_REQUIRED=1, so there a server that does
not answer is a failure. Anywhere else (plain `make test`) the lane is skipped, saying why.

The model is weak (135M parameters): these tests assert the engine's contract around a real
server, never the model's wording or quality.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from evals.bench.extraction_models import with_model
from rag_engine.config import EngineConfig
from rag_engine.engine import Engine
from rag_engine.retrieval.answer import Answer
from tests.conftest import ROOT, _embed_env, _neo4j_uri, with_artifacts

MODEL = "smollm2-135m"
PRE_CALL_REFUSALS = {"low_evidence", "low_evidence_coverage", "empty_context"}
"""Refusals decided before any model call (rag_engine/retrieval/answer.py, ``Reason``)."""
ENDPOINT_ENV = "RAG_LLM_ENDPOINT"


def _endpoint() -> str:
    url = os.environ.get(ENDPOINT_ENV)
    required = os.environ.get("RAG_REAL_MODEL_REQUIRED") == "1"
    if not url:
        if required:
            pytest.fail(f"{ENDPOINT_ENV} is not set")
        pytest.skip(f"real-model lane: {ENDPOINT_ENV} is not set (run `make test-real-model`)")
    try:
        httpx.get(url.rstrip("/").removesuffix("/v1") + "/health", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        if required:
            pytest.fail(f"no LLM server answers at {url} ({type(exc).__name__})")
        pytest.skip(f"real-model lane: no LLM server answers at {url} (run `make test-real-model`)")
    return url


@pytest.fixture(scope="session")
def llm_endpoint() -> str:
    return _endpoint()


def lane_config(base: EngineConfig, **budgets: int) -> EngineConfig:
    """The shipped config with the local model answering everything it can: extraction,
    answers, query expansion. One call at a time (the server runs one generation at a time; a
    queued call would spend its timeout waiting), small output caps and a small context, so the
    lane stays within minutes on one thread."""
    cfg = with_model(base, MODEL, output_tokens=budgets.pop("max_output_tokens", 160))
    return cfg.model_copy(
        update={
            "defaults": cfg.defaults.model_copy(update={"local_inference_model": MODEL}),
            "budgets": cfg.budgets.model_copy(update={"batch_size": 1, **budgets}),
            "context": cfg.context.model_copy(update={"documents": 500, "answer": 128}),
        }
    )


@pytest.fixture
def lane_engine(llm_endpoint: str, base_config: EngineConfig, tmp_path: Path, neo4j_driver) -> Iterator[Engine]:
    env = {
        "NEO4J_URI": _neo4j_uri(),
        "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        ENDPOINT_ENV: llm_endpoint,
        **_embed_env(),
    }
    eng = Engine(with_artifacts(lane_config(base_config, max_chunks_per_run=3), tmp_path / "artifacts"), ROOT, env)
    yield eng
    eng.close()


def assert_handled(answer: Answer, context_ids: set[str] | frozenset[str], identity: str) -> None:
    """A grounded question that reached the model: the engine's handling of the branch SmolLM2's
    answer took, each asserted for itself (the model is too weak to be held to one branch)."""
    assert answer.reason not in PRE_CALL_REFUSALS
    branch = (answer.method, answer.insufficient_evidence)
    if branch == ("model", False):  # a cited answer: only ids of the context, never empty
        assert answer.citations and set(answer.citations) <= context_ids and answer.text.strip()
        assert answer.model == identity
    elif branch == ("model", True):  # the model's verdict, or its citations all outside the context
        assert answer.reason in {"model_insufficient", "no_valid_citations", "empty_answer"}
        assert answer.citations == () and answer.text == "insufficient evidence"
        assert not set(answer.dropped_citation_ids) & context_ids
        assert answer.dropped_citations == len(answer.dropped_citation_ids)
        if answer.reason == "no_valid_citations":  # every id it cited was outside: each counted
            assert answer.dropped_citation_ids
    else:  # the model's answer was unusable: the engine's own extractive answer, saying why
        assert branch == ("extractive", False), branch
        assert answer.fallback == "generation_failed"
        assert answer.error_type in {"ProviderResponseInvalid", "ProviderTimeout"}
        assert answer.citations and set(answer.citations) <= context_ids
