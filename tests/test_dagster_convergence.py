"""A partial extraction stays visibly partial, and Dagster and `rag ingest` finish it between them.

The extraction run budget allows one chunk per run, so the three chunks of the test document take
three runs, the first two of which leave it partial. Runs go through the Dagster job and `rag
ingest` in several orders; each run continues what the previous one left (extraction answers are
cached), every graph_writes after an extraction that changed runs again, and the end state equals
one unlimited `rag ingest` of the same corpus (a digest of chunks, entities, mentions and reference
edges). Without dropping the stamps of a partial step, a second partial Dagster run skipped
graph_writes (its stamp still held): the graph was under-written ([1, 1, 3, 3] chunks with
mentions instead of [1, 2, 3, 3]).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import dagster as dg
import pytest
import yaml
from typer.testing import CliRunner

from rag_assets.definitions import build_definitions
from rag_assets.demo import materialize_pack
from rag_engine.cli.app import app
from rag_engine.engine import Engine
from rag_engine.ingest.pipeline import ingest_pack
from tests.support.fake_openai import FakeOpenAI, ok, usage

WORDS = {"laptop": "system", "runbook": "process", "device": "system", "credentials": "system"}

HANDBOOK = """---
id: POL-901
collection: kb_internal
---
# Device handbook

## Laptops
Every laptop is encrypted before it is handed out.

## Lost devices
A lost device is reported within one hour.

## Credentials
Credentials are rotated after a device is lost, as the runbook says.
"""


def one_document(corpus) -> None:
    """The test corpus as one document of three sections (three chunks)."""
    for old in corpus.iterdir():
        old.unlink()
    (corpus / "handbook.md").write_text(HANDBOOK, encoding="utf-8")


def extraction_answer(body: dict) -> object:
    """A valid extraction of the chunk in the request: the known words it contains, as entities."""
    text = " ".join(str(m.get("content", "")) for m in body.get("messages", []) if m.get("role") == "user").lower()
    chunk = text.rsplit("chunk", 1)[-1]
    entities = [{"name": w, "type": t, "description": ""} for w, t in WORDS.items() if w in chunk]
    return ok(json.dumps({"entities": entities, "relationships": []}), model="fake-model-1", usage=usage(120, 30))


@pytest.fixture
def llm():
    with FakeOpenAI() as server:
        server.responder = extraction_answer
        yield server


def with_llm(url: str, max_chunks: int | None) -> Callable[[str], str]:
    """The config with a free local extraction model on the loopback server and a run budget."""

    def edit(text: str) -> str:
        cfg = yaml.safe_load(text)
        cfg["providers"].append(
            {
                "name": "fake_llm",
                "kind": "openai_compatible",
                "hosted": False,
                "endpoint": url,
                "max_retries": 0,
                "timeout_s": 10,
            }
        )
        cfg["models"].append(
            {
                "name": "fake-chat",
                "provider": "fake_llm",
                "role": "generation",
                "served_model": "fake-model",
                "capabilities": ["generation", "structured_output"],
            }
        )
        cfg["defaults"]["extraction_model"] = "fake-chat"
        if max_chunks is not None:
            cfg.setdefault("budgets", {})["max_chunks_per_run"] = max_chunks
        return yaml.safe_dump(cfg, sort_keys=False)

    return edit


def digest(engine: Engine, pack: str) -> tuple[str, dict[str, int]]:
    """What a reader can retrieve, without the pack name: active chunks, their entity mentions and
    reference edges, by anchor."""
    rows, _, _ = engine.driver.execute_query(
        """
        MATCH (c:Chunk {pack: $pack, active: true})
        OPTIONAL MATCH (e:Entity)-[:MENTIONED_IN]->(c)
        OPTIONAL MATCH (c)-[:REFERENCES]->(t:Chunk)
        RETURN c.anchor AS anchor, c.text AS text, collect(DISTINCT e.name) AS entities,
               collect(DISTINCT t.anchor) AS refs
        ORDER BY anchor
        """,
        pack=pack,
        database_=engine.database,
    )
    state = [(r["anchor"], r["text"], sorted(r["entities"]), sorted(r["refs"])) for r in rows]
    counts = {
        "chunks": len(state),
        "chunks_with_mentions": sum(1 for s in state if s[2]),
        "mentions": sum(len(s[2]) for s in state),
        "references": sum(len(s[3]) for s in state),
    }
    return hashlib.sha256(json.dumps(state).encode()).hexdigest(), counts


def reference_digest(variant, unique: str, llm: FakeOpenAI) -> tuple[str, dict[str, int]]:
    engine = build_definitions(variant("reference", edit=with_llm(llm.base_url, None))).resources["rag"].engine()
    pack = engine.pack(unique)
    reports = ingest_pack(engine, pack)
    assert not reports["llm_extraction"].total("skipped")
    return digest(engine, pack.name)


def dagster_run(defs: dg.Definitions, instance: dg.DagsterInstance, engine: Engine, name: str) -> None:
    result = materialize_pack(defs, instance, engine.pack(name))
    assert result.success, [e.message for e in result.all_events if e.is_failure]


def cli_run(defs: dg.Definitions, instance: dg.DagsterInstance, engine: Engine, name: str) -> None:
    ingest_pack(engine, engine.pack(name), skip_unchanged=True)


ORDERS = {
    "dagster only": "DDDD",
    "cli only": "CCCC",
    "dagster first, alternating": "DCDC",
    "cli first, alternating": "CDCD",
    "dagster twice, then cli": "DDCC",
}


@pytest.mark.parametrize("order", ORDERS.values(), ids=ORDERS.keys())
def test_dagster_and_rag_ingest_finish_a_partial_extraction_and_converge(variant, unique, llm, order, tmp_path):
    defs = build_definitions(variant("budget", edit=with_llm(llm.base_url, 1)))
    one_document(tmp_path / "corpus")
    engine = defs.resources["rag"].engine()
    instance = dg.DagsterInstance.ephemeral()
    seen = []
    for step in order:  # three runs extract one chunk each; the fourth finds nothing left
        (dagster_run if step == "D" else cli_run)(defs, instance, engine, unique)
        seen.append(digest(engine, unique)[1]["chunks_with_mentions"])
    assert seen == [1, 2, 3, 3], seen
    # the same corpus in one unlimited run (last: the extraction cache the runs filled answers it)
    got = digest(engine, unique)
    want, want_counts = reference_digest(variant, unique, llm)
    assert want_counts["chunks"] == 3 and want_counts["chunks_with_mentions"] == 3, want_counts
    assert got == (want, want_counts)


def test_rag_ingest_exits_1_while_the_budget_leaves_chunks_and_0_once_done(variant, unique, llm, tmp_path):
    path = variant("cli-budget", edit=with_llm(llm.base_url, 2))
    one_document(tmp_path / "corpus")
    runner = CliRunner()
    first = runner.invoke(app, ["--config", path, "ingest", "--pack", unique, "--json"])
    assert first.exit_code == 1, first.output
    data = json.loads(first.stdout)
    assert data["extraction_chunks_left"] == 1 and data["failed"] == 0
    second = runner.invoke(app, ["--config", path, "ingest", "--pack", unique, "--json"])
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["extraction_chunks_left"] == 0
