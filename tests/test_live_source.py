"""The live SQL leg against the real PostgreSQL: a database, a table and a SELECT-only role made
here, rows written during the test, and the rest of the query path on the real Neo4j."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy
from pydantic import ValidationError
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url

from rag_engine.config import EngineConfig, LiveSourceConfig, PackEntry
from rag_engine.engine import Engine
from rag_engine.governance.audit import audit_trail
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.packs import load_pack
from rag_engine.retrieval.context import render_document
from rag_engine.retrieval.live_query import statement
from rag_engine.retrieval.outcome import QueryOutcome
from rag_engine.retrieval.query import run_query
from tests.conftest import ROOT, _embed_env, _neo4j_uri, with_artifacts
from tests.support.packs import POLICY, RUNBOOK

pytestmark = pytest.mark.postgres

URL_ENV = "RAG_LIVE_TICKETS_URL"
WINDOW_MS = 3_600_000  # one hour
QUESTION = "When does the replacement shipment for ticket 4471 arrive?"
FRESH = "The replacement shipment for ticket 4471 left the warehouse and will arrive on Friday."


class LiveDb:
    def __init__(self, admin: sqlalchemy.Engine, owner_url: str, reader_url: str):
        self.admin, self.owner_url, self.reader_url = admin, owner_url, reader_url

    def write(self, key: int, body: str, committed_at: datetime | None = None) -> None:
        with self.admin.begin() as conn:
            conn.execute(
                sqlalchemy.text(
                    "INSERT INTO ticket_updates (id, title, body, committed_at) "
                    "VALUES (:id, :title, :body, COALESCE(:at, now()))"
                ),
                {"id": key, "title": f"Ticket update {key}", "body": body, "at": committed_at},
            )

    def count(self) -> int:
        with self.admin.connect() as conn:
            return int(conn.execute(sqlalchemy.text("SELECT count(*) FROM ticket_updates")).scalar_one())

    def clear(self) -> None:
        with self.admin.begin() as conn:
            conn.execute(sqlalchemy.text("TRUNCATE ticket_updates"))


@pytest.fixture(scope="module")
def live_db() -> Iterator[LiveDb]:
    """A database of its own with one table, and a login role that may only SELECT from it."""
    base = os.environ.get("RAG_TEST_PG_LEDGER_URL")
    if not base:
        pytest.fail("RAG_TEST_PG_LEDGER_URL is not set: point it at the test PostgreSQL (make test sets it)")
    suffix = uuid.uuid4().hex[:8]
    db, role = f"rag_live_{suffix}", f"rag_live_reader_{suffix}"
    server = sqlalchemy.create_engine(make_url(base).set(database="postgres"), isolation_level="AUTOCOMMIT")
    with server.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{db}"'))
        conn.execute(sqlalchemy.text(f'CREATE ROLE "{role}" LOGIN'))
    owner_url = make_url(base).set(database=db)
    admin = sqlalchemy.create_engine(owner_url)
    with admin.begin() as conn:
        conn.execute(
            sqlalchemy.text(
                "CREATE TABLE ticket_updates (id bigint PRIMARY KEY, title text, body text NOT NULL, "
                "committed_at timestamptz NOT NULL DEFAULT now())"
            )
        )
        # a view that outlasts any statement timeout the source is given
        conn.execute(
            sqlalchemy.text(
                "CREATE VIEW slow_updates AS SELECT * FROM ticket_updates WHERE EXISTS (SELECT 1 FROM pg_sleep(5))"
            )
        )
        conn.execute(sqlalchemy.text(f'GRANT CONNECT ON DATABASE "{db}" TO "{role}"'))
        conn.execute(sqlalchemy.text(f'GRANT USAGE ON SCHEMA public TO "{role}"'))
        conn.execute(sqlalchemy.text(f'GRANT SELECT ON ticket_updates, slow_updates TO "{role}"'))
    reader_url = owner_url.set(username=role).render_as_string(hide_password=False)
    yield LiveDb(admin, owner_url.render_as_string(hide_password=False), reader_url)
    admin.dispose()
    with server.connect() as conn:
        conn.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
        conn.execute(sqlalchemy.text(f'DROP ROLE IF EXISTS "{role}"'))
    server.dispose()


def _source(**update: object) -> LiveSourceConfig:
    fields: dict[str, object] = {
        "name": "tickets",
        "url_env": URL_ENV,
        "collection": "kb_internal",
        "table": "public.ticket_updates",
        "key_column": "id",
        "text_column": "body",
        "heading_column": "title",
        "committed_at_column": "committed_at",
        "row_cap": 5,
        "freshness_window_ms": WINDOW_MS,
        "timeout_ms": 2000,
    }
    return LiveSourceConfig.model_validate({**fields, **update})


def _config(base_config: EngineConfig, artifacts: Path) -> EngineConfig:
    cfg = with_artifacts(base_config, artifacts)
    # the live table is the authority on current state here: its leg outweighs the two store legs'
    # first places together (only this pack is served, so its runbook, which says "ticket", is the
    # lexical and dense rank 1 of these questions; 2.0 tied with it)
    retrieval = cfg.retrieval.model_copy(update={"weights": {**cfg.retrieval.weights, "live": 2.5}})
    return cfg.model_copy(update={"retrieval": retrieval})


@pytest.fixture(scope="module")
def kb(base_config, tmp_path_factory, neo4j_driver, live_db) -> tuple[EngineConfig, PackEntry]:
    """A throwaway KB pack (kb_internal policy and runbook) ingested once, declaring the live source."""
    base = tmp_path_factory.mktemp("live")
    corpus = base / "corpus"
    corpus.mkdir()
    (corpus / "policy.md").write_text(POLICY)
    (corpus / "runbook.md").write_text(RUNBOOK)
    name = "t" + uuid.uuid4().hex[:10]
    entry = base_config.pack("company_x_kb").model_copy(
        update={"name": name, "corpus": str(corpus), "live_sources": (_source(),)}
    )
    cfg = _config(base_config, base / "artifacts")
    eng = Engine(cfg, ROOT, {"NEO4J_URI": _neo4j_uri(), **_embed_env()}, packs=[load_pack(entry, ROOT)])
    ingest_pack(eng, eng.pack(name), extract=False)
    eng.close()
    return cfg, entry


def _engine(kb, tmp_path: Path, url: str | None, **source: object) -> Engine:
    cfg, entry = kb
    if source:
        entry = entry.model_copy(update={"live_sources": (_source(**source),)})
    env = {
        "NEO4J_URI": _neo4j_uri(),
        "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        **_embed_env(),
        **({URL_ENV: url} if url else {}),
    }
    return Engine(cfg, ROOT, env, packs=[load_pack(entry, ROOT)])


@pytest.fixture
def live(kb, tmp_path, live_db) -> Iterator[Engine]:
    live_db.clear()
    eng = _engine(kb, tmp_path, live_db.reader_url)
    yield eng
    eng.close()


def _ask(eng: Engine, question: str = QUESTION, role: str = "employee", **kw: object) -> QueryOutcome:
    return run_query(eng, question, role, local_inference=False, generate=False, session_id="live-test", **kw)


def _live_step(out: QueryOutcome) -> dict:
    return next(s for s in out.retrieval.trace if s["step"] == "live")


def _events(out: QueryOutcome, name: str) -> list[dict]:
    return [e for e in out.events if e["event"] == name]


# -- a fresh row -------------------------------------------------------------------------------


def test_fresh_row_is_retrieved_and_cited_with_provenance(live, live_db):
    live_db.write(101, FRESH)
    live_db.write(102, "The printer toner order 9000 was closed.")
    before = datetime.now(UTC)
    out = _ask(live)
    top = out.retrieval.candidates[0]
    assert top.chunk_id == "live:tickets:101" and top.collection == "kb_internal"
    assert top.sources == ("dense", "live")  # its own leg, and its place on the dense leg (live_on_dense)
    pv = top.provenance
    assert pv is not None and (pv.source, pv.table, pv.key, pv.stale) == (
        "tickets",
        "public.ticket_updates",
        "101",
        False,
    )
    assert pv.committed_at <= pv.retrieved_at and pv.retrieved_at >= before
    assert "live:tickets:102" not in {c.chunk_id for c in out.retrieval.candidates}  # holds no question word
    assert out.answer.citations == ("live:tickets:101",) and "Friday" in out.answer.text
    cited = next(d for d in out.context.documents if d.chunk_id == "live:tickets:101")
    assert cited.provenance == pv
    step = _live_step(out)
    assert step["hits"] == 1 and step["stale"] == [] and step["not_permitted"] == []
    (source,) = step["sources"]
    assert source["source"] == "tickets" and source["rows"] == 1 and 0 <= source["lag_ms"] <= WINDOW_MS
    assert not _events(out, "freshness_breach") and not _events(out, "live_source_unavailable")
    # the store legs ran as well, and the audit record keeps the live candidate's provenance
    assert any({"lexical", "dense"} & set(c.sources) for c in out.retrieval.candidates)
    record = audit_trail(live).records(event="query")[-1].payload
    assert record["candidates"][0]["provenance"]["key"] == "101" and record["cited"] == ["live:tickets:101"]


# -- a breach ------------------------------------------------------------------------------------


def test_old_rows_breach_freshness_are_marked_stale_and_still_answer(live, live_db):
    old = datetime.now(UTC) - timedelta(days=2)
    live_db.write(201, FRESH, committed_at=old)
    out = _ask(live)
    (breach,) = _events(out, "freshness_breach")
    assert breach["source"] == "tickets" and breach["window_ms"] == WINDOW_MS
    assert breach["lag_ms"] > WINDOW_MS and breach["stale_candidates"] == 1
    assert datetime.fromisoformat(breach["newest_committed_at"]) == old
    top = out.retrieval.candidates[0]
    assert top.chunk_id == "live:tickets:201" and top.provenance is not None and top.provenance.stale
    assert _live_step(out)["stale"] == ["live:tickets:201"] and _live_step(out)["sources"][0]["stale"] is True
    assert not out.answer.insufficient_evidence and out.answer.citations == ("live:tickets:201",)
    shown = next(d for d in out.context.documents if d.chunk_id == "live:tickets:201")
    assert "STALE" in render_document(shown.number, shown)  # the model is told, too
    trail = audit_trail(live)
    audited = trail.records(event="freshness_breach")
    assert len(audited) == 1 and audited[0].payload["lag_ms"] == breach["lag_ms"]
    assert audited[0].query_id == trail.records(event="query")[-1].query_id


def test_lag_is_measured_on_the_newest_row_used(live, live_db):
    live_db.write(301, FRESH, committed_at=datetime.now(UTC) - timedelta(days=3))
    live_db.write(302, "Ticket 4471: the replacement shipment is delayed at the warehouse.")
    out = _ask(live)
    assert not _events(out, "freshness_breach")
    live_ids = [c.chunk_id for c in out.retrieval.candidates if c.provenance]
    assert sorted(live_ids) == ["live:tickets:301", "live:tickets:302"]


# -- outages ---------------------------------------------------------------------------------------


def _closed_port_url(live_db: LiveDb) -> str:
    return make_url(live_db.reader_url).set(host="127.0.0.1", port=1).render_as_string(hide_password=False)


def test_unreachable_source_degrades_to_the_other_legs(kb, tmp_path, live_db):
    eng = _engine(kb, tmp_path, _closed_port_url(live_db))
    try:
        out = _ask(eng, "Report a lost laptop within what time?")
    finally:
        eng.close()
    (event,) = _events(out, "live_source_unavailable")
    assert event == {
        "event": "live_source_unavailable",
        "source": "tickets",
        "collection": "kb_internal",
        "reason": "unreachable",
        "error_type": "OperationalError",
    }
    assert out.retrieval.candidates and not any(c.provenance for c in out.retrieval.candidates)
    cited = next(d for d in out.context.documents if d.chunk_id == out.answer.citations[0])
    assert not out.answer.insufficient_evidence and {"lexical", "dense"} & set(cited.sources)
    audited = audit_trail(eng).records(event="live_source_unavailable")
    assert [r.payload["reason"] for r in audited] == ["unreachable"]
    assert "127.0.0.1" not in json.dumps([r.model_dump(mode="json") for r in audit_trail(eng).records()])


def test_unset_url_variable_and_timeout_are_reported_not_raised(kb, tmp_path, live_db):
    unset = _engine(kb, tmp_path, None)
    slow = _engine(kb, tmp_path, live_db.reader_url, table="slow_updates", timeout_ms=300)
    try:
        no_url = _ask(unset)
        timed_out = _ask(slow)
    finally:
        unset.close()
        slow.close()
    assert [e["reason"] for e in _events(no_url, "live_source_unavailable")] == ["url_env_not_set"]
    (event,) = _events(timed_out, "live_source_unavailable")
    assert (event["reason"], event["error_type"]) == ("timeout", "QueryCanceled")
    assert no_url.retrieval.candidates and timed_out.retrieval.candidates


# -- the policy gate ---------------------------------------------------------------------------------


def test_a_role_without_the_collection_never_queries_the_source(kb, tmp_path, live_db):
    """The source points at a closed port: any query attempt would be a live_source_unavailable."""
    eng = _engine(kb, tmp_path, _closed_port_url(live_db))
    try:
        public = _ask(eng, role="public")
        narrowed = _ask(eng, collections=["kb_public"])
        employee = _ask(eng)
    finally:
        eng.close()
    for out in (public, narrowed):
        assert not _events(out, "live_source_unavailable")
        assert _live_step(out)["not_permitted"] == ["tickets"] and _live_step(out)["sources"] == []
    assert _events(employee, "live_source_unavailable")  # the same engine does reach for it when permitted


def test_a_role_without_the_collection_never_sees_live_rows(live, live_db):
    live_db.write(401, FRESH)
    out = _ask(live, role="public")
    assert not any(c.provenance for c in out.retrieval.candidates) and _live_step(out)["hits"] == 0


# -- hostile input and the read-only session ---------------------------------------------------------


def test_sql_metacharacters_in_the_question_are_only_data(kb, tmp_path, live, live_db):
    live_db.write(501, FRESH)
    hostile = "shipment 4471'); DROP TABLE ticket_updates; -- %_\\ \" $1 :id ' OR '1'='1"
    out = _ask(live, hostile)
    assert not _events(out, "live_source_unavailable")
    assert [c.chunk_id for c in out.retrieval.candidates if c.provenance] == ["live:tickets:501"]
    assert live_db.count() == 1
    compiled = statement(_source(), ["drop", "table"]).compile(dialect=postgresql.dialect())
    assert "drop" not in str(compiled).lower() and {"drop", "table"} <= set(compiled.params.values())
    ilike = _engine(kb, tmp_path, live_db.reader_url, match="ilike")
    try:
        out = _ask(ilike, "shipment 100% _arrive_ \\ 4471")
    finally:
        ilike.close()
    assert [c.chunk_id for c in out.retrieval.candidates if c.provenance] == ["live:tickets:501"]


def test_the_source_session_is_read_only_whatever_the_role(kb, tmp_path, live_db):
    """Even with the table owner's URL, a statement through the live source's connection cannot write."""
    live_db.clear()
    source = _source()
    eng = _engine(kb, tmp_path, live_db.owner_url)
    try:
        with eng.live_sources.sql_engine(source).connect() as conn:
            assert conn.execute(sqlalchemy.text("SHOW transaction_read_only")).scalar_one() == "on"
            with pytest.raises(sqlalchemy.exc.InternalError, match="read-only transaction"):
                conn.execute(sqlalchemy.text("INSERT INTO ticket_updates (id, body) VALUES (1, 'x')"))
    finally:
        eng.close()
    assert live_db.count() == 0


# -- config ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("update", "message"),
    [
        ({"table": "ticket_updates; DROP TABLE x"}, "table"),
        ({"text_column": "Body"}, "text_column"),
        ({"url_env": "postgresql://user:pw@host/db"}, "environment variable NAME"),
        ({"match": "regex"}, "match"),
        ({"row_cap": 0}, "row_cap"),
    ],
)
def test_live_source_config_is_strict(update, message):
    with pytest.raises(ValidationError, match=message):
        _source(**update)


def test_a_live_source_serves_one_of_its_packs_collections(base_config):
    entry = base_config.pack("company_x_kb").model_dump()
    with pytest.raises(ValidationError, match="not one of the pack's collections"):
        PackEntry.model_validate({**entry, "live_sources": [_source(collection="legal_public").model_dump()]})
    ok = PackEntry.model_validate({**entry, "live_sources": [_source().model_dump()]})
    packs = [p.model_dump() for p in base_config.packs]
    packs = [ok.model_dump() if p["name"] == "company_x_kb" else p for p in packs]
    legal = next(p for p in packs if p["name"] == "legal_regulatory")
    legal["live_sources"] = [_source(collection="legal_public").model_dump()]
    with pytest.raises(ValidationError, match="duplicate live source names"):
        EngineConfig.model_validate({**base_config.model_dump(), "packs": packs})


# -- a live row competes on its evidence (retrieval.live_on_dense) ---------------------------------

# Live-only questions, each answered by one row of the ticket table and by no passage of the Company
# X knowledge base (written before any ranking was run; the KB has policies and runbooks on the
# same topics, so its general passages compete with the rows).
LIVE_ONLY = [
    (
        601,
        "Is the Berlin office VPN concentrator down?",
        "The VPN concentrator in the Berlin office failed at 08:40; remote staff should connect through "
        "the Frankfurt gateway until the replacement unit is installed.",
    ),
    (
        602,
        "When will the expense portal be back online?",
        "The expense reporting portal is offline for its database migration and returns on Tuesday at 09:00 CET.",
    ),
    (
        603,
        "Have the new laptops for the sales team shipped yet?",
        "The sales team's replacement laptops left the vendor's warehouse on Monday; delivery to the Madrid "
        "office is expected on Thursday.",
    ),
    (
        604,
        "Is there an incident with payroll right now?",
        "Severity 2 incident INC-5521: the payroll export job has failed since midnight and finance will "
        "delay this month's run until it is fixed.",
    ),
    (
        605,
        "Who covers the database on-call rota this week?",
        "On-call handover: Priya Nair covers the database rota this week, with Tomas Weber as secondary.",
    ),
    (
        606,
        "Why can't I open the internal wiki?",
        "The internal wiki is unreachable because its TLS certificate expired this morning; a renewed "
        "certificate is being deployed.",
    ),
    (
        607,
        "Does the leave request tool work again?",
        "The leave request tool was repaired after this morning's outage; requests submitted during the "
        "outage must be submitted again.",
    ),
    (
        608,
        "Has the security review of Acme Analytics been approved?",
        "Vendor onboarding: the security review of Acme Analytics was approved by the CISO, so the "
        "contract can now be signed.",
    ),
]


@pytest.fixture(scope="module")
def kb_live(base_config, neo4j_driver, tmp_path_factory, live_db) -> Iterator[tuple[Engine, Engine]]:
    """The whole Company X KB corpus (under a throwaway pack name, ingested once) declaring the
    ticket table, at the shipped leg weights (live 1.0): one engine with live rows placed on the
    dense leg, one without."""
    live_db.clear()
    for key, _question, body in LIVE_ONLY:
        live_db.write(key, body)
    base = tmp_path_factory.mktemp("live_kb")
    entry = base_config.pack("company_x_kb").model_copy(
        update={"name": "t" + uuid.uuid4().hex[:10], "live_sources": (_source(row_cap=20),)}
    )
    env = {"NEO4J_URI": _neo4j_uri(), **_embed_env(), URL_ENV: live_db.reader_url}

    def engine(on_dense: bool, name: str) -> Engine:
        cfg = with_artifacts(base_config, base / name)
        retrieval = cfg.retrieval.model_copy(update={"live_on_dense": on_dense})
        cfg = cfg.model_copy(update={"retrieval": retrieval})
        return Engine(
            cfg,
            ROOT,
            {**env, "RAG_LEDGER_URL": f"sqlite:///{base / name / 'ledger.sqlite'}"},
            packs=[load_pack(entry, ROOT)],
        )

    on, off = engine(True, "on"), engine(False, "off")
    ingest_pack(on, on.pack(entry.name), extract=False)
    yield on, off
    on.close()
    off.close()
    live_db.clear()


def _rank(eng: Engine, question: str, chunk_id: str, k: int = 20) -> int | None:
    from rag_engine.retrieval.retriever import retrieve

    result = retrieve(eng, question, "employee", k=k)
    # a measurement, not a degraded query: the question's embedding and the rows' both arrived
    assert not [e for e in result.events if e["event"] in ("dense_degraded", "live_rows_not_embedded")], result.events
    ids = [c.chunk_id for c in result.candidates]
    return ids.index(chunk_id) + 1 if chunk_id in ids else None


def test_a_row_that_alone_answers_reaches_the_top_k_on_the_dense_leg(kb_live):
    """Each live-only question's row: rank with and without the dense placement (printed with -s)."""
    on, off = kb_live
    ranks = [
        (q, _rank(off, q, f"live:tickets:{key}"), _rank(on, q, f"live:tickets:{key}")) for key, q, _body in LIVE_ONLY
    ]
    cited = [
        tuple(f"live:tickets:{key}" in _ask(eng, q).answer.citations for eng in (off, on))
        for key, q, _body in LIVE_ONLY
    ]
    print("\n| question | rank, own leg only | rank, placed on the dense leg | answer cites the row (off / on) |")
    print("| --- | --- | --- | --- |")
    for (q, before, after), (c_off, c_on) in zip(ranks, cited, strict=True):
        print(
            f"| {q} | {before or '>20'} | {after or '>20'} | {'yes' if c_off else 'no'} / {'yes' if c_on else 'no'} |"
        )
    k = on.cfg.retrieval.final_k
    assert all(after is not None and after <= k for _q, _before, after in ranks), ranks
    assert all(before is None or after <= before for _q, before, after in ranks), ranks
    assert all(c_on for _c_off, c_on in cited), cited  # and the user reads it: the answer cites the row


def test_the_rows_placed_on_the_dense_leg_cost_stored_answers_nothing(kb_live):
    """The held-out KB questions (the test split, nobody tuned on it) with the ticket rows present:
    the gold passage's rank with the rows placed on the dense leg against their own leg only."""
    from evals.runner import load_golden
    from rag_engine.retrieval.retriever import retrieve

    on, off = kb_live
    golden = load_golden(ROOT / "packs/company_x_kb/golden/heldout.yaml")
    asked = [q for q in golden["queries"] if q["gold"] and q["role"] == "employee"]

    def reciprocal_rank(eng: Engine, q: dict) -> float:
        anchors = [c.anchor for c in retrieve(eng, q["question"], q["role"], k=10).candidates]
        return next((1 / i for i, a in enumerate(anchors, 1) if a in set(q["gold"])), 0.0)

    mrr_on = sum(reciprocal_rank(on, q) for q in asked) / len(asked)
    mrr_off = sum(reciprocal_rank(off, q) for q in asked) / len(asked)
    print(
        f"\nKB held-out MRR@10 with ticket rows present ({len(asked)} questions): "
        f"placed on dense {mrr_on:.3f}, own leg only {mrr_off:.3f}"
    )
    assert mrr_on >= mrr_off - 0.02, (mrr_on, mrr_off)
