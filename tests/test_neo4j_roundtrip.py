"""The real Neo4j answers: a write/read round trip and the schema the engine relies on."""

import neo4j

from rag_engine.store import schema


def test_write_read_round_trip(neo4j_driver, unique):
    neo4j_driver.execute_query("CREATE (:Probe {id: $id, n: 42})", id=unique)
    records, _, _ = neo4j_driver.execute_query(
        "MATCH (p:Probe {id: $id}) RETURN p.n AS n", id=unique, routing_=neo4j.RoutingControl.READ
    )
    assert [r["n"] for r in records] == [42]
    neo4j_driver.execute_query("MATCH (p:Probe {id: $id}) DELETE p", id=unique)


def test_server_is_neo4j_5_26(neo4j_driver):
    records, _, _ = neo4j_driver.execute_query("CALL dbms.components() YIELD name, versions RETURN name, versions")
    assert records[0]["name"] == "Neo4j Kernel"
    assert records[0]["versions"][0].startswith("5.26.")


def test_schema_is_idempotent(neo4j_driver):
    schema.ensure_schema(neo4j_driver, "neo4j")
    schema.ensure_schema(neo4j_driver, "neo4j")
    records, _, _ = neo4j_driver.execute_query("SHOW INDEXES YIELD name, type RETURN name, type")
    names = {r["name"]: r["type"] for r in records}
    assert names[schema.CHUNK_FULLTEXT] == "FULLTEXT"
    assert "chunk_id" in names  # the uniqueness constraint's backing index
