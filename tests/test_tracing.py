"""OpenTelemetry spans of the query path (rag_engine/tracing.py): off by default; on, a query's
spans reach a real OTLP/HTTP receiver on loopback (a tiny HTTP server here that decodes the
protobuf ExportTraceServiceRequest with opentelemetry-proto), one span per stage, nested under one
trace, and the query's audit record carries that trace's id."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from rag_engine import tracing
from rag_engine.config import TracingConfig
from rag_engine.config.serving import PrincipalConfig
from rag_engine.engine import Engine
from rag_engine.governance.audit import audit_trail
from tests.conftest import ROOT, _embed_env, _neo4j_uri, with_artifacts
from tests.support.packs import POLICY, RUNBOOK, temp_pack

QUESTION = "What does the runbook say to do with a lost laptop?"
CALLER_KEY = "SENTINEL-trace-caller-key-5e4d3c2b1a09f8e7d6c5b4a3"
CALLER_KEY_ENV = "RAG_TEST_TRACE_CALLER_KEY_SHA256"
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
# one span per stage of the query path; the graph leg's traversal runs only when the planner says so
STAGES = {
    "rag.query",
    "rag.query_expansion",
    "rag.retrieve",
    "rag.policy_gate",
    "rag.exact_references",
    "rag.lexical",
    "rag.dense",
    "rag.live",
    "rag.planner",
    "rag.fusion",
    "rag.rerank",
    "rag.sentence_evidence",
    "rag.reference_expansion",
    "rag.model_rerank",
    "rag.context",
    "rag.answer",
    "rag.audit",
}
LEGS = {"rag.policy_gate", "rag.exact_references", "rag.lexical", "rag.dense", "rag.live", "rag.planner", "rag.fusion"}


def _value(v: Any) -> Any:
    """An OTLP attribute's value (``AnyValue``: whichever of its fields is set)."""
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


class Receiver(BaseHTTPRequestHandler):
    """POST /v1/traces: decode the request, keep its spans, answer as a collector does."""

    spans: ClassVar[list[dict[str, Any]]] = []
    paths: ClassVar[list[str]] = []
    content_types: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).paths.append(self.path)
        type(self).content_types.append(self.headers.get("Content-Type", ""))
        request = ExportTraceServiceRequest.FromString(body)
        for resource_spans in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}["service.name"]
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    type(self).spans.append(
                        {
                            "name": s.name,
                            "trace_id": s.trace_id.hex(),
                            "span_id": s.span_id.hex(),
                            "parent": s.parent_span_id.hex() or None,
                            "service": service,
                            "attributes": {a.key: _value(a.value) for a in s.attributes},
                        }
                    )
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture
def receiver() -> Iterator[str]:
    Receiver.spans, Receiver.paths, Receiver.content_types = [], [], []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)  # a free loopback port
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
    server.shutdown()
    thread.join(timeout=5)
    tracing.configure(enabled=False)  # the tests after this one run untraced, as by default


def _engine(
    base_config, tmp_path: Path, unique: str, tracing_cfg: TracingConfig, env: dict[str, str] | None = None
) -> Engine:
    from rag_engine.ingest.pipeline import ingest_pack

    cfg = with_artifacts(base_config, tmp_path / "artifacts").model_copy(update={"tracing": tracing_cfg})
    if env:  # served: one principal, its key's hash in the variable CALLER_KEY_ENV
        principal = PrincipalConfig(id="caller", roles=("employee",), key_sha256_env=CALLER_KEY_ENV)
        cfg = cfg.model_copy(update={"serving": cfg.serving.model_copy(update={"principals": (principal,)})})
    env = {
        "NEO4J_URI": _neo4j_uri(),
        "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        **_embed_env(),
        **(env or {}),
    }
    pack = temp_pack(
        Engine(cfg, ROOT, env, packs=[]), unique, tmp_path / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK}
    )
    eng = Engine(cfg, ROOT, env, packs=[pack])
    ingest_pack(eng, pack, extract=False)
    return eng


def test_tracing_is_off_by_default(base_config):
    assert base_config.tracing.enabled is False
    tracing.configure(enabled=False)
    with tracing.span("rag.query") as span:
        assert span is None
        assert tracing.trace_id() is None


def test_a_query_exports_one_span_per_stage_under_one_trace_and_audits_its_id(
    base_config, tmp_path, unique, neo4j_driver, receiver
):
    from rag_engine.retrieval.query import run_query

    cfg = TracingConfig(enabled=True, endpoint=receiver, service_name="rag-engine-test")
    eng = _engine(base_config, tmp_path, unique, cfg)
    try:
        session = f"s-{unique}"
        run_query(eng, QUESTION, "employee", session_id=session, generate=False, local_inference=False)
        assert tracing.flush()
        records = audit_trail(eng).records(session_id=session, event="query")
    finally:
        eng.close()

    assert set(Receiver.paths) == {"/v1/traces"}
    assert set(Receiver.content_types) == {"application/x-protobuf"}
    spans = Receiver.spans
    names = [s["name"] for s in spans]
    assert set(names) >= STAGES, sorted(STAGES - set(names))
    assert names.count("rag.query") == 1
    assert {s["trace_id"] for s in spans} == {spans[0]["trace_id"]}, "every span in one trace"
    assert {s["service"] for s in spans} == {"rag-engine-test"}
    by_id = {s["span_id"]: s for s in spans}
    root = next(s for s in spans if s["name"] == "rag.query")
    assert root["parent"] is None
    for s in spans:  # every span hangs under the query's root span
        node = s
        while node["parent"] is not None:
            node = by_id[node["parent"]]
        assert node is root, s["name"]
    retrieve = next(s for s in spans if s["name"] == "rag.retrieve")
    for s in spans:
        if s["name"] in LEGS:
            assert by_id[s["parent"]] is retrieve, s["name"]
    rerank = next(s for s in spans if s["name"] == "rag.rerank")
    assert by_id[next(s for s in spans if s["name"] == "rag.sentence_evidence")["parent"]] is rerank
    lexical = next(s for s in spans if s["name"] == "rag.lexical")["attributes"]
    assert "rag.hits" in lexical
    # a step's wall time and its part in Neo4j statements (Trace.step) are attributes of its span
    assert 0 < lexical["rag.store_ms"] <= lexical["rag.ms"], lexical
    assert next(s for s in spans if s["name"] == "rag.fusion")["attributes"]["rag.store_ms"] == 0
    totals = next(s for s in spans if s["name"] == "rag.reference_expansion")["attributes"]
    assert totals["rag.store_statements"] >= 2 and totals["rag.store_ms_total"] >= lexical["rag.store_ms"], totals
    [record] = records
    assert record.payload["trace_id"] == root["trace_id"]


def test_without_tracing_the_audit_record_has_no_trace_id(base_config, tmp_path, unique, neo4j_driver):
    from rag_engine.retrieval.query import run_query

    eng = _engine(base_config, tmp_path, unique, TracingConfig())
    try:
        session = f"s-{unique}"
        run_query(eng, QUESTION, "employee", session_id=session, generate=False, local_inference=False)
        [record] = audit_trail(eng).records(session_id=session, event="query")
    finally:
        eng.close()
    assert record.payload["trace_id"] is None


def _served_query(eng: Engine, session: str, headers: dict[str, str]) -> dict[str, Any]:
    """One /v1/query to ``eng`` served on loopback, with ``headers``; the spans flushed; returns
    the query's root span and its audit record's trace id."""
    import httpx

    from rag_engine.serving.app import create_app
    from tests.serving_support import bearer, running

    with running(create_app(eng)) as url:
        response = httpx.post(
            f"{url}/v1/query",
            json={"question": QUESTION, "role": "employee", "session_id": session, "generate": False},
            headers={**bearer(CALLER_KEY), **headers},
            timeout=60,
        )
    assert response.status_code == 200, response.text
    assert tracing.flush()
    [record] = audit_trail(eng).records(session_id=session, event="query")
    roots = [s for s in Receiver.spans if s["name"] == "rag.query"]
    assert len(roots) <= 1, roots
    return {"root": roots[0] if roots else None, "audited": record.payload["trace_id"], "spans": list(Receiver.spans)}


@pytest.mark.parametrize("accept", [True, False])
def test_a_served_query_continues_the_callers_trace_unless_told_not_to(
    base_config, tmp_path, unique, neo4j_driver, receiver, accept
):
    """An HTTP caller's W3C traceparent makes the query's root span a child of the caller's span,
    in the caller's trace, and the audit record carries that trace's id; with
    ``tracing.accept_incoming: false`` the query starts a trace of its own."""
    from tests.serving_support import sha

    cfg = TracingConfig(enabled=True, endpoint=receiver, service_name="rag-engine-test", accept_incoming=accept)
    eng = _engine(base_config, tmp_path, unique, cfg, env={CALLER_KEY_ENV: sha(CALLER_KEY)})
    try:
        got = _served_query(eng, f"s-{unique}", {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"})
    finally:
        eng.close()
    root = got["root"]
    assert root is not None
    if accept:
        assert (root["trace_id"], root["parent"]) == (CALLER_TRACE, CALLER_SPAN)
        assert {s["trace_id"] for s in got["spans"]} == {CALLER_TRACE}
    else:
        assert root["trace_id"] != CALLER_TRACE and root["parent"] is None
    assert got["audited"] == root["trace_id"]


def test_a_malformed_traceparent_is_ignored(base_config, tmp_path, unique, neo4j_driver, receiver):
    from tests.serving_support import sha

    cfg = TracingConfig(enabled=True, endpoint=receiver, service_name="rag-engine-test")
    eng = _engine(base_config, tmp_path, unique, cfg, env={CALLER_KEY_ENV: sha(CALLER_KEY)})
    try:
        got = _served_query(eng, f"s-{unique}", {"traceparent": "00-not-a-trace-01"})
    finally:
        eng.close()
    assert got["root"]["parent"] is None and len(got["root"]["trace_id"]) == 32
    assert got["audited"] == got["root"]["trace_id"]


def test_a_caller_that_does_not_sample_its_trace_is_not_traced_here(
    base_config, tmp_path, unique, neo4j_driver, receiver
):
    """The caller's sampled flag decides (a parent-based sampler): a traceparent with flags 00
    exports no span of the query, and its audit record has no trace id, whatever sample_ratio is."""
    from tests.serving_support import sha

    cfg = TracingConfig(enabled=True, endpoint=receiver, service_name="rag-engine-test", sample_ratio=1.0)
    eng = _engine(base_config, tmp_path, unique, cfg, env={CALLER_KEY_ENV: sha(CALLER_KEY)})
    try:
        got = _served_query(eng, f"s-{unique}", {"traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-00"})
    finally:
        eng.close()
    assert got["root"] is None and got["spans"] == []
    assert got["audited"] is None


def test_an_mcp_tool_call_continues_the_callers_trace(base_config, tmp_path, unique, neo4j_driver, receiver):
    """The same over MCP at /mcp (the official SDK's client, streamable HTTP): the `ask` tool's
    query is a child of the span named by the HTTP request's traceparent, and audited under its trace."""
    import asyncio

    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client

    from rag_engine.serving.app import create_app
    from tests.serving_support import running, sha

    cfg = TracingConfig(enabled=True, endpoint=receiver, service_name="rag-engine-test")
    eng = _engine(base_config, tmp_path, unique, cfg, env={CALLER_KEY_ENV: sha(CALLER_KEY)})
    headers = {"Authorization": f"Bearer {CALLER_KEY}", "traceparent": f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"}

    async def ask(url: str) -> Any:
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
        ):
            return await client.call_tool("ask", {"question": QUESTION, "role": "employee", "generate": False})

    try:
        with running(create_app(eng)) as url:
            asked = asyncio.run(ask(url))
        assert not asked.is_error, asked.content
        assert tracing.flush()
        [record] = audit_trail(eng).records(event="query")
    finally:
        eng.close()
    [root] = [s for s in Receiver.spans if s["name"] == "rag.query"]
    assert (root["trace_id"], root["parent"]) == (CALLER_TRACE, CALLER_SPAN)
    assert record.payload["trace_id"] == CALLER_TRACE
