"""Reads routed: every query-path and MCP read transaction declares read access, so over a
``neo4j://`` routing URI a cluster (or Aura) serves it from a follower or read replica.

Two checks. From the source (``ast``, like tests/test_architecture.py): in the query floors
(``store``, ``retrieval``, ``serving``) and the few functions of other floors the query path calls,
every session is opened with ``default_access_mode=READ_ACCESS``, every ``execute_query`` says
``routing_=READ``, and nothing calls ``execute_write``. At run time: the service answers retrieve,
query, passage and the MCP read tools on a driver that records the access mode of every session
and managed query it is asked for (the real driver underneath), and every one is READ. Then the
same store reads and a service query over a ``neo4j://`` routing URI to the single test server
(Community answers routing requests with itself as the one router, reader and writer).
"""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import neo4j
import pytest

from tests.conftest import _neo4j_uri
from tests.serving_support import APP_KEY, OPERATOR_KEY, bearer, service_over
from tests.test_serving_mcp import over_http

ROOT = Path(__file__).resolve().parents[1]
QUERY_FLOORS = ("rag_engine/store", "rag_engine/retrieval", "rag_engine/serving")
STORE_WRITE_SIDE = {
    "rag_engine/store/schema.py": "constraints and indexes, created by the pipeline and the re-index",
    "rag_engine/store/versions.py": "document versions, chunks and vectors (graph.writer)",
    "rag_engine/store/references.py": "citations and REFERENCES edges (graph.writer)",
    "rag_engine/store/inferred.py": "the LLM-inferred graph and extraction runs (graph.writer)",
    "rag_engine/store/stamps.py": "the pipeline's step stamps",
    "rag_engine/store/reindex.py": "the blue/green re-index",
    "rag_engine/store/measurement.py": "the evals' and benchmarks' fixtures",
}
"""Modules of the store's write side, which the query path never imports (checked below): not
held to read access, but for the functions named in ``CALLED_FROM_THE_QUERY_PATH``."""
CALLED_FROM_THE_QUERY_PATH = {
    "rag_engine/store/schema.py": ("current_embedder",),
    "rag_engine/graph/cleanup.py": ("cleanup_inputs",),
}
"""Functions of other floors the query path or an MCP read tool calls (the active index, a cleanup plan)."""
QUESTION = "How fast must a lost laptop be reported?"


def _keyword(call: ast.Call, name: str) -> str | None:
    found = next((k.value for k in call.keywords if k.arg == name), None)
    return ast.unparse(found) if found is not None else None


def store_calls(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, problem) for each session, managed query or write transaction that is not a read."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        attr = node.func.attr
        if attr == "session" and "driver" in ast.unparse(node.func.value):
            mode = _keyword(node, "default_access_mode")
            if mode is None or not mode.endswith("READ_ACCESS"):
                yield node.lineno, f"session opened without default_access_mode=READ_ACCESS ({mode})"
        elif attr == "execute_query":
            routing = _keyword(node, "routing_")
            if routing is None or not routing.endswith("READ"):
                yield node.lineno, f"execute_query without routing_=READ ({routing})"
        elif attr in ("execute_write", "write_transaction"):
            yield node.lineno, f"{attr}: a write transaction"


def functions(tree: ast.Module, names: tuple[str, ...]) -> list[ast.AST]:
    return [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]


def test_the_query_path_declares_read_access_everywhere_in_its_source():
    problems = []
    checked = 0
    for floor in QUERY_FLOORS:
        for path in sorted((ROOT / floor).rglob("*.py")):
            if path.relative_to(ROOT).as_posix() in STORE_WRITE_SIDE:
                continue
            for line, problem in store_calls(ast.parse(path.read_text(encoding="utf-8"))):
                problems.append(f"{path.relative_to(ROOT)}:{line}: {problem}")
            checked += 1
    for rel, names in CALLED_FROM_THE_QUERY_PATH.items():
        found = functions(ast.parse((ROOT / rel).read_text(encoding="utf-8")), names)
        assert len(found) == len(names), f"{rel}: {names} moved: update CALLED_FROM_THE_QUERY_PATH"
        for fn in found:
            problems += [f"{rel}:{line}: {problem}" for line, problem in store_calls(fn)]
    assert checked > 20
    assert not problems, "\n".join(problems)


def test_the_query_path_imports_no_module_of_the_stores_write_side():
    write_side = {rel.removesuffix(".py").replace("/", ".") for rel in STORE_WRITE_SIDE}
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
        for floor in ("rag_engine/retrieval", "rag_engine/serving")
        for path in sorted((ROOT / floor).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [f"{node.module}.{a.name}" for a in node.names] + [node.module or ""]
        )
        if name in write_side
    ]
    assert found == []


def test_the_source_check_finds_a_write_session_and_a_write_query():
    """The check above fails on what it must catch (so its silence means something)."""
    bad = ast.parse(
        "def f(driver, db):\n"
        "    with driver.session(database=db) as s:\n"
        "        s.execute_write(lambda tx: tx.run('MATCH (n) RETURN n'))\n"
        "    driver.execute_query('MATCH (n) RETURN n', database_=db)\n"
        "    driver.execute_query('MATCH (n) RETURN n', database_=db, routing_=neo4j.RoutingControl.WRITE)\n"
        "    with driver.session(database=db, default_access_mode=neo4j.READ_ACCESS) as s:\n"
        "        pass\n"
    )
    assert sorted(line for line, _ in store_calls(bad)) == [2, 3, 4, 5]


class _Session:
    """A real session; records a write transaction asked of it."""

    def __init__(self, real: neo4j.Session, seen: list[str]):
        self._real, self._seen = real, seen

    def execute_write(self, *args: Any, **kwargs: Any) -> Any:
        self._seen.append("execute_write")
        return self._real.execute_write(*args, **kwargs)

    def __enter__(self) -> _Session:
        self._real.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Any:
        return self._real.__exit__(*exc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class RecordingDriver:
    """The real driver, recording the access mode of every session and managed query asked of it."""

    def __init__(self, real: neo4j.Driver):
        self._real = real
        self.seen: list[str] = []

    def session(self, **kwargs: Any) -> _Session:
        self.seen.append(f"session {kwargs.get('default_access_mode', neo4j.WRITE_ACCESS)}")
        return _Session(self._real.session(**kwargs), self.seen)

    def execute_query(self, *args: Any, **kwargs: Any) -> Any:
        self.seen.append(f"execute_query {kwargs.get('routing_', neo4j.RoutingControl.WRITE)!s}")
        return self._real.execute_query(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def test_every_store_access_of_the_service_and_the_mcp_read_tools_is_a_read(variant, unique, tmp_path, monkeypatch):
    with service_over(variant, unique, tmp_path, monkeypatch) as (url, engine, _):
        recording = RecordingDriver(engine.driver)
        engine.__dict__["driver"] = recording  # the engine's cached driver: every call reads it
        http = httpx.Client(headers=bearer(APP_KEY), timeout=60)
        found = http.post(f"{url}/v1/retrieve", json={"question": QUESTION})
        assert found.status_code == 200, found.text
        chunk = found.json()["candidates"][0]["chunk_id"]
        assert http.post(f"{url}/v1/query", json={"question": QUESTION, "generate": False}).status_code == 200
        assert http.post(f"{url}/v1/passage", json={"chunk_id": chunk}).status_code == 200
        _, results = asyncio.run(
            over_http(url, APP_KEY, [("search", {"question": QUESTION}), ("fetch_passage", {"chunk_id": chunk})])
        )
        _, (plan,) = asyncio.run(over_http(url, OPERATOR_KEY, [("request_graph_cleanup", {})]))
        http.close()
    assert not any(r.is_error for r in [*results, plan]), [r.content for r in [*results, plan]]
    assert len(recording.seen) >= 5, recording.seen
    reads = {f"session {neo4j.READ_ACCESS}", f"execute_query {neo4j.RoutingControl.READ!s}"}
    assert set(recording.seen) <= reads, sorted(set(recording.seen) - reads)


@pytest.fixture
def routing_uri(monkeypatch) -> str:
    """The test server's address as a ``neo4j://`` routing URI (NEO4J_URI set to it)."""
    direct = _neo4j_uri()
    scheme, _, rest = direct.partition("://")
    assert scheme in ("bolt", "neo4j"), direct
    uri = f"neo4j://{rest}"
    monkeypatch.setenv("NEO4J_URI", uri)
    return uri


def test_the_store_reads_and_the_service_work_over_a_neo4j_routing_uri(
    variant, unique, tmp_path, monkeypatch, routing_uri
):
    from rag_engine.store.session import read, read_transaction

    with neo4j.GraphDatabase.driver(routing_uri, auth=None) as driver:
        driver.verify_connectivity()
        table = driver.execute_query("CALL dbms.routing.getRoutingTable({}, 'neo4j')", database_="system")
        roles = {r["role"] for r in table.records[0]["servers"]}
        assert roles == {"ROUTE", "READ", "WRITE"}, roles
        assert read(driver, "neo4j", "RETURN 1 AS one") == [{"one": 1}]
        with read_transaction(driver, "neo4j", packs=[]) as rx:
            assert rx.rows("RETURN 2 AS two") == [{"two": 2}]
    with service_over(variant, unique, tmp_path, monkeypatch) as (url, engine, _):
        assert engine.neo4j_target.uri == routing_uri
        r = httpx.post(
            f"{url}/v1/query", json={"question": QUESTION, "generate": False}, headers=bearer(APP_KEY), timeout=60
        )
        assert r.status_code == 200, r.text
        assert r.json()["retrieval"]["candidates"], r.json()
