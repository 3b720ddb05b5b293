"""Item 7: the extraction token budget counts every billed token and is checked per call.

The probe: schema-invalid answers were charged 0 though billed (a model answering garbage spent
7.3 M tokens against a 100 k budget), and the budget was checked once per batch (600 k spent
against 100 k). Expected: a call starts only if its worst case (prompt estimate + max output
tokens) fits what is left, so a run never bills more than its budget; the first-run profile
(10 chunks, 4,000 tokens, batch 2) is never exceeded.
"""

from __future__ import annotations

import json
import math

import pytest

from rag_engine.ingest.pipeline import ingest_pack
from tests.faults.conftest import llm_engine
from tests.support.fake_openai import FakeOpenAI, ok, usage
from tests.support.packs import temp_pack

MAX_OUTPUT = 200
DEFAULT_OUTPUT = 200  # what the fake "model" writes when the request sets no max_tokens


def corpus(n_docs: int = 4, sections: int = 4) -> dict[str, str]:
    files = {}
    for d in range(n_docs):
        body = "\n\n".join(
            f"## Part {s}\nThe Security team reviews system {d}.{s} every quarter and logs it." for s in range(sections)
        )
        files[f"doc{d}.md"] = f"---\ncollection: kb_internal\n---\n# Document {d}\n\n{body}\n"
    return files


def billed_like_a_provider(body: dict, completion: str) -> dict:
    """Prompt tokens ~ 4 characters per token of what was sent; the output the model wrote."""
    prompt = math.ceil(sum(len(str(m.get("content", ""))) for m in body["messages"]) / 4)
    return usage(prompt, body.get("max_tokens") or DEFAULT_OUTPUT) if completion == "garbage" else usage(prompt, 60)


def garbage(body: dict):
    return ok(
        "I am sorry, here is some prose instead of JSON " * 40,
        model="fake-model-1",
        usage=billed_like_a_provider(body, "garbage"),
    )


def valid(body: dict):
    answer = {
        "entities": [{"name": "Security team", "type": "team", "description": ""}],
        "relationships": [],
    }
    return ok(json.dumps(answer), model="fake-model-1", usage=billed_like_a_provider(body, "valid"))


@pytest.fixture
def server():
    with FakeOpenAI() as srv:
        yield srv


def _billed(engine, run_id: str) -> tuple[int, int, int]:
    """The run's extraction calls only: the same run also embeds its chunks when the embedding cache is cold."""
    records = [r for r in engine.ledger.records(run_id=run_id) if r.purpose == "graph_extraction"]
    return (
        sum(r.input_tokens + r.output_tokens for r in records),
        len(records),
        sum(1 for r in records if r.status == "error"),
    )


def _run_node(engine, run_id: str) -> dict:
    rows, _, _ = engine.driver.execute_query(
        "MATCH (r:ExtractionRun {run_id: $r}) RETURN r.tokens AS tokens, r.status AS status, r.chunks AS calls",
        r=run_id,
    )
    return dict(rows[0])


def test_invalid_answers_are_charged_and_the_first_run_profile_is_never_exceeded(
    base_config, tmp_path, server, unique, neo4j_driver
):
    engine = llm_engine(
        base_config,
        tmp_path,
        server.base_url,
        budgets={
            "max_chunks_per_run": 10,
            "max_tokens_per_run": 2000,  # ~7 calls of ~281 tokens (prompt ~81 + 200 written): tokens run out first
            "batch_size": 2,
            "max_output_tokens": MAX_OUTPUT,
        },
    )
    server.responder = garbage
    pack = temp_pack(engine, unique, tmp_path / "corpus", corpus())
    run_id = f"garbage-{unique}"
    try:
        reports = ingest_pack(engine, pack, run_id=run_id)
        billed, calls, errors = _billed(engine, run_id)
        assert calls == errors > 0  # every answer was invalid, every one billed
        assert billed <= 2000, f"{calls} invalid answers billed {billed} tokens against a budget of 2000"
        node = _run_node(engine, run_id)
        assert node["tokens"] == billed  # the run's budget saw exactly what the ledger billed
        assert node["status"] == "budget_exhausted" and node["calls"] == calls
        skipped = [
            why
            for k in reports["llm_extraction"].done
            for why in engine.artifacts.read(unique, k, "llm_extraction")["skipped"].values()
        ]
        assert skipped and set(skipped) == {"max_tokens_per_run"}
        assert all(c.body.get("max_tokens") == MAX_OUTPUT for c in server.calls("/chat/completions"))
    finally:
        engine.close()


def test_the_budget_is_checked_per_call_not_per_batch(base_config, tmp_path, server, unique, neo4j_driver):
    engine = llm_engine(
        base_config,
        tmp_path,
        server.base_url,
        budgets={
            "max_chunks_per_run": 100,
            "max_tokens_per_run": 1500,
            "batch_size": 8,
            "max_output_tokens": MAX_OUTPUT,
        },
    )
    server.responder = valid
    pack = temp_pack(engine, unique, tmp_path / "corpus", corpus())
    run_id = f"batch-{unique}"
    try:
        reports = ingest_pack(engine, pack, run_id=run_id)
        billed, calls, errors = _billed(engine, run_id)
        assert errors == 0 and 0 < calls < 16
        assert billed <= 1500, f"a batch of 8 calls billed {billed} tokens against a budget of 1500"
        assert _run_node(engine, run_id)["tokens"] == billed
        assert reports["llm_extraction"].total("extracted") == calls
    finally:
        engine.close()


def test_a_call_whose_worst_case_does_not_fit_never_starts(base_config, tmp_path, server, unique, neo4j_driver):
    engine = llm_engine(
        base_config,
        tmp_path,
        server.base_url,
        budgets={"max_tokens_per_run": 100, "batch_size": 2, "max_output_tokens": MAX_OUTPUT},
    )
    server.responder = valid
    pack = temp_pack(engine, unique, tmp_path / "corpus", corpus(1, 2))
    try:
        reports = ingest_pack(engine, pack, run_id=f"tiny-{unique}")
        assert server.calls("/chat/completions") == []  # 100 tokens cannot cover 200 of output alone
        assert reports["llm_extraction"].total("skipped") == 2
    finally:
        engine.close()
