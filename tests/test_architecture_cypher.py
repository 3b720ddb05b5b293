"""Cypher lives in the store layer only: every Neo4j statement the project runs is text under
``rag_engine/store/``, where callers above pass parameters to small functions by concern.

The check reads every string literal (f-string parts included, docstrings excluded) of the engine,
the Dagster layer, the evals and the tools with ``ast`` and fails on one shaped like a Cypher
clause outside ``rag_engine/store/``. Prose that names a clause ("UNWIND + MERGE") does not match:
a clause is recognised by what follows it (a pattern's parenthesis, a parameter, a procedure).
SQL (the embedding cache's SQLite, the live source's PostgreSQL) has no such clause and passes.

Out of scope, each named constant with its reason (``BASELINE_QUERIES``): benchmark queries that
stand for what the engine is compared against (another library's raw query, an algorithm the
engine replaced). They are the yardstick, not the engine: moving them into the store would make
the store carry code nothing runs but the comparison. Any other Cypher in those modules still fails.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("rag_engine", "rag_assets", "evals", "tools")
STORE = ROOT / "rag_engine" / "store"

CYPHER = re.compile(
    r"\b(?:OPTIONAL\s+)?MATCH\s*\("
    r"|\bMERGE\s*\("
    r"|\bCREATE\s*\("
    r"|\bUNWIND\s+[$\[]"
    r"|\bCALL\s+(?:db|dbms|apoc|gds)\.\w"
    r"|\bCALL\s*\([\w\s,]*\)\s*\{"
    r"|\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:(?:VECTOR|FULLTEXT|RANGE|TEXT|POINT|LOOKUP)\s+)?(?:INDEX|CONSTRAINT)\b"
    r"|\bDROP\s+(?:INDEX|CONSTRAINT)\b"
    r"|\bDETACH\s+DELETE\b"
    r"|\bSHOW\s+(?:VECTOR\s+|FULLTEXT\s+)?(?:INDEXES|CONSTRAINTS)\b"
)
"""A Cypher clause as a statement writes it: a pattern after MATCH/MERGE/CREATE, a list or
parameter after UNWIND, a procedure or subquery after CALL, a schema or delete command."""

BASELINE_QUERIES: dict[str, str] = {
    "evals/bench/query.py::RAW_HYBRID": "neo4j-graphrag-python's HybridRetriever query shape, the raw "
    "hybrid query the engine's overhead is measured against (engine/raw)",
    "evals/bench/resolution.py::_OLD_DROP": "the reference resolution the engine replaced (drop and "
    "re-derive a whole pack), the baseline of the incremental one",
    "evals/bench/resolution.py::_OLD_RESOLVE": "the same replaced algorithm's resolve step",
}
"""``path::CONSTANT`` of the module-level constants allowed to hold Cypher outside the store, with why."""


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (module, class, function) and of bare string statements
    (attribute docstrings): text about the code, not text the code runs."""
    out = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for stmt in body:
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                    out.add(id(stmt.value))
    return out


def _constant_names(tree: ast.Module) -> dict[int, str]:
    """id of each string inside a module-level assignment -> the name it is assigned to."""
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign | ast.AnnAssign) and stmt.value is not None:
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            if len(targets) == 1 and isinstance(targets[0], ast.Name):
                out.update({id(node): targets[0].id for node in ast.walk(stmt.value)})
    return out


def cypher_strings(source: str) -> Iterator[tuple[int, str, str]]:
    """(line, constant name or '', text) of every string literal of ``source`` holding a Cypher clause."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    names = _constant_names(tree)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and CYPHER.search(node.value)
        ):
            yield node.lineno, names.get(id(node), ""), " ".join(node.value.split())[:80]


def violations(root: Path = ROOT) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if path.is_relative_to(root / "rag_engine" / "store"):
                continue
            found += [
                f"{rel}:{line}: {text}"
                for line, name, text in cypher_strings(path.read_text(encoding="utf-8"))
                if f"{rel}::{name}" not in BASELINE_QUERIES
            ]
    return sorted(found)


def test_no_cypher_outside_the_store() -> None:
    assert violations() == []


def test_every_baseline_query_exists_and_still_holds_cypher() -> None:
    for key, reason in BASELINE_QUERIES.items():
        rel, name = key.split("::")
        assert reason.strip(), key
        held = {n for _, n, _ in cypher_strings((ROOT / rel).read_text(encoding="utf-8"))}
        assert name in held, f"{key} holds no Cypher any more: drop it from BASELINE_QUERIES"


def test_a_planted_statement_is_found(tmp_path: Path) -> None:
    (tmp_path / "rag_engine" / "store").mkdir(parents=True)
    (tmp_path / "rag_engine" / "store" / "fine.py").write_text('Q = "MATCH (c:Chunk) RETURN c"\n')
    (tmp_path / "rag_engine" / "ops").mkdir()
    (tmp_path / "rag_engine" / "ops" / "planted.py").write_text(
        '"""Writes are UNWIND + MERGE, MATCH (c) in a docstring is prose."""\n'
        "def f(where):\n"
        '    return f"MATCH (c:Chunk {{active: true}}) {where} RETURN count(c)"\n'
    )
    (tmp_path / "evals" / "bench").mkdir(parents=True)
    (tmp_path / "evals" / "cache.py").write_text('SQL = "CREATE TABLE IF NOT EXISTS t (k TEXT); DELETE FROM t"\n')
    (tmp_path / "evals" / "bench" / "query.py").write_text(
        'RAW_HYBRID = "CALL db.index.vector.queryNodes($i, $k, $e)"\nOTHER = "UNWIND $rows AS row"\n'
    )
    assert violations(tmp_path) == [
        "evals/bench/query.py:2: UNWIND $rows AS row",
        "rag_engine/ops/planted.py:3: MATCH (c:Chunk {active: true})",
    ]


def test_each_clause_shape_is_recognised_and_prose_is_not() -> None:
    for text in (
        "OPTIONAL MATCH (k)<-[:ANSWERS_TO]-(c)",
        "MERGE (d:Document {key: $key})",
        "UNWIND $rows AS row",
        "CALL db.index.fulltext.queryNodes('x', $q)",
        "CALL () { MATCH (d) RETURN d }",
        "CREATE VECTOR INDEX chunk_embedding IF NOT EXISTS",
        "CREATE CONSTRAINT x IF NOT EXISTS",
        "DROP INDEX x IF EXISTS",
        "MATCH (m) DETACH DELETE m",
        "SHOW INDEXES YIELD name",
    ):
        assert CYPHER.search(text), text
    for text in ("UNWIND + MERGE in a managed transaction", "CREATE TABLE t (k TEXT)", "a MATCH of names"):
        assert not CYPHER.search(text), text
