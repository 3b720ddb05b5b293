"""The principal's id on every usage record of a query: ``run_query(actor=...)`` on the real Neo4j,
the question embedded by the local embedding server, and expansion, rerank and generation answered
by a loopback OpenAI-compatible server; the ledger is the test's own SQLite file. A query without an
actor, and ingestion, leave it None; `rag costs --by-actor` sums by it."""

from __future__ import annotations

import json
import os

import yaml

from rag_engine.config import load_config
from rag_engine.engine import Engine
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.retrieval.query import run_query
from tests.conftest import ROOT
from tests.support.cli import rag
from tests.support.fake_openai import FakeOpenAI, ok, usage


def with_local_llm(endpoint: str):
    """local-chat (generation, query expansion, rerank) on the loopback server, for every model step."""

    def edit(text: str) -> str:
        cfg = yaml.safe_load(text)
        for provider in cfg["providers"]:
            if provider["name"] == "local_llm":
                provider.update(enabled=True, endpoint=endpoint, max_retries=0, timeout_s=10)
        cfg["defaults"].update(generation_model="local-chat", local_inference_model="local-chat")
        return yaml.safe_dump(cfg, sort_keys=False)

    return edit


def test_every_model_call_of_a_query_carries_its_actor(variant, unique, tmp_path, neo4j_driver):
    env = {**os.environ, "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}"}
    with FakeOpenAI() as server:
        config = variant("actor", edit=with_local_llm(server.base_url))
        engine = Engine(load_config(config), ROOT, env)
        try:
            ingest_pack(engine, engine.pack(unique), extract=False)
            ingested = {r.id for r in engine.ledger.records()}
            server.enqueue(ok(json.dumps({"queries": ["lost laptop reporting deadline"]}), usage=usage(40, 9)))
            out = run_query(engine, "How quickly must a lost laptop be reported?", "employee", actor="analyst")
            mine = [r for r in engine.ledger.records() if r.id not in ingested]
            run_query(engine, "Who approves a laptop replacement?", "employee")
            theirs = [r for r in engine.ledger.records() if r.id not in ingested and r not in mine]
        finally:
            engine.close()
    assert out.retrieval.candidates
    purposes = {r.purpose for r in mine}
    assert {"query_expansion", "query", "rerank", "answer"} <= purposes, purposes  # each step metered
    assert {r.actor for r in mine} == {"analyst"}, [(r.purpose, r.actor) for r in mine]
    assert any(r.status == "ok" and r.provider == "local_llm" for r in mine)
    assert theirs and {r.actor for r in theirs} == {None}  # no actor: none leaks from the query before
    assert {r.actor for r in engine.ledger.records() if r.id in ingested} <= {None}  # ingestion: no principal
    # `rag costs --by-actor`: a row per provider / model / actor
    res = rag("--config", config, "costs", "--by-actor", "--json", env={"RAG_LEDGER_URL": env["RAG_LEDGER_URL"]})
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["by"] == "actor" and {"analyst", "(none)"} <= {row["actor"] for row in data["rows"]}
    assert sum(row["calls"] for row in data["rows"] if row["actor"] == "analyst") == len(mine)
    text = rag("--config", config, "costs", "--by-actor", env={"RAG_LEDGER_URL": env["RAG_LEDGER_URL"]})
    assert text.exit_code == 0 and "actor" in text.stdout and "analyst" in text.stdout


def test_a_run_context_meters_calls_that_name_no_run_and_a_tally_collects_them(variant, unique, tmp_path):
    """``in_run``: a query's calls that name no run id (the question's embedding, deep in retrieval,
    on its worker thread) carry the block's; a call's own run id wins. ``tallying``: the records
    written inside a block, each once, however deep or on which thread."""
    from rag_engine.usage import in_run, tallying

    env = {**os.environ, "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}"}
    engine = Engine(load_config(variant("run")), ROOT, env)
    try:
        ingest_pack(engine, engine.pack(unique), extract=False)
        before = {r.id for r in engine.ledger.records()}
        with in_run("outer-run"), tallying() as tallied:
            run_query(engine, "How quickly must a lost laptop be reported?", "employee", generate=False)
            engine.embed_texts(["own run"], purpose="query", run_id="own-run")
        outside = run_query(engine, "Who approves a laptop replacement?", "employee", generate=False)
        new = [r for r in engine.ledger.records() if r.id not in before]
    finally:
        engine.close()
    assert outside.retrieval.candidates
    in_block = [r for r in new if r.id in {t.id for t in tallied}]
    assert [r.id for r in tallied] == [r.id for r in in_block]  # each record once, in order
    assert {r.run_id for r in in_block} == {"outer-run", "own-run"}
    assert [r.purpose for r in in_block if r.run_id == "outer-run"] == ["query"]  # the question's embedding
    assert {r.run_id for r in new if r not in in_block} == {None}  # nothing leaks out of the block
