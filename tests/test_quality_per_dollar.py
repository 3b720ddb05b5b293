"""Quality per dollar by generation model: eval reports x the ledger's measured tokens x current
prices, on SQLite and on the real PostgreSQL; `rag costs --by-model`; the usage_costs asset; and
the audit trail's daily summary asset."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import dagster as dg
import pytest
import yaml

from rag_engine.config import LocalCostConfig, load_config
from rag_engine.governance.audit import AuditRecord, AuditTrail
from rag_engine.ops.quality_per_dollar import by_model
from rag_engine.ops.quality_render import render
from rag_engine.providers.ledger import UsageLedger
from rag_engine.usage import UsageRecord
from tests.conftest import ROOT
from tests.support.cli import rag

OPENAI = ("openai", "gpt-4o-mini")  # priced in config/pricing.yaml (0.15 / 0.075 cached / 0.60 per million)
DEMO = ("demo_replay", "fixture-demo-replay")  # demo-chat: priced as machine time per recorded token (a fixture price)
EMBED = ("local_embed", "multilingual-e5-small-q4")  # the default embedder: the shared query-side call


def _report(path: Path, provider: str, model: str, stated: float, at: datetime, answered_as: tuple = ()) -> None:
    """A report whose 20 answers to questions with a fact were written by ``provider``/``model`` (the
    extractive answer for provider ``none``), ``stated`` of them stating the fact, plus answers that do
    not count: decided before any call, and one to a question without a fact."""
    method = "extractive" if provider == "none" else "model"
    hits = round(stated * 20)
    queries = [{"id": f"q{i}", "answer_method": method, "fact_stated": i < hits} for i in range(20)]
    queries += [
        {"id": "refused", "answer_method": "none", "fact_stated": False},
        {"id": "no-fact", "answer_method": method, "fact_stated": None},
    ]
    path.write_text(
        json.dumps(
            {
                "schema": "rag-eval-report/2",
                "created_at": at.isoformat(),
                "golden": {"paths": ["g.yaml"], "hash": "a" * 64},
                "generation": {"provider": provider, "model": model, "reported_models": list(answered_as)},
                "metrics": {"ndcg@10": 0.99, "queries": len(queries)},  # retrieval: not the answers' quality
                "queries": queries,
            }
        ),
        encoding="utf-8",
    )


def _use(purpose: str, who: tuple[str, str], n_in: int, n_out: int, cost: str | None, **kw) -> UsageRecord:
    return UsageRecord(
        run_id="qpd",
        purpose=purpose,
        provider=who[0],
        requested_model=who[1],
        input_tokens=n_in,
        output_tokens=n_out,
        cost=None if cost is None else Decimal(cost),
        **kw,
    )


def _fill(url: str) -> None:
    ledger = UsageLedger(url)
    for rec in (
        # gpt-4o-mini: two answers, 4000 input (200 cached) and 400 output tokens in all
        _use("answer", OPENAI, 1000, 100, "0.000135", cached_input_tokens=200),
        _use("answer", OPENAI, 3000, 300, "0.00063"),
        _use("answer", OPENAI, 0, 0, None, status="error", error_type="APITimeoutError"),  # not a query
        _use("answer", DEMO, 500, 50, None, estimated=True),  # a fixture's characters / 4
        _use("query", EMBED, 12, 0, "0.00001"),
        _use("query", EMBED, 14, 0, "0.00001"),
        # one-off spend: never folded into the per-query cost
        _use("graph_extraction", OPENAI, 9000, 2000, "0.002"),
        _use("graph_extraction", DEMO, 800, 200, None),
        _use("index", EMBED, 50000, 0, "0"),
    ):
        ledger.record(rec)
    ledger.dispose()


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    """Two eval reports (an older one for gpt-4o-mini that the newer supersedes) and a config reading them."""
    reports = tmp_path / "reports"
    reports.mkdir()
    now = datetime.now(UTC)
    _report(reports / "old.json", *OPENAI, 0.5, now - timedelta(days=3))
    _report(reports / "mini.json", *OPENAI, 0.8, now, ("gpt-4o-mini-2024-07-18",))
    _report(reports / "demo.json", *DEMO, 0.75, now, ("fixture-grounded-demo-answerer",))
    (reports / "gate.json").write_text(json.dumps({"schema": "rag-eval-gate/2", "status": "pass"}))
    data = yaml.safe_load((ROOT / "config" / "engine.yaml").read_text())
    data["costs"] = {"query_rate_per_hour": 100, "report_dirs": [str(reports)]}
    data["evals"]["reports_dir"] = str(tmp_path / "no-reports")
    cfg_path = tmp_path / "engine.yaml"
    cfg_path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return cfg_path, reports


def _replay_rate() -> LocalCostConfig:
    replay = load_config(ROOT / "config" / "engine.yaml").provider("demo_replay")
    assert replay is not None and replay.local_cost is not None
    return replay.local_cost


def _check_table(cfg_path: Path, url: str) -> None:
    table = by_model(load_config(cfg_path), ROOT, url)
    rows = {r.model: r for r in table.rows}
    mini, demo = rows["gpt-4o-mini"], rows["demo-chat"]
    # (3800 x 0.15 + 200 x 0.075 + 400 x 0.60) / 1e6 over 2 answers, plus one query embedding (0.00001)
    assert mini.generation_cost_per_query == Decimal("0.0004125")
    assert mini.shared_cost_per_query == Decimal("0.00001")
    assert mini.cost_per_query == Decimal("0.0004225")
    assert mini.cost_per_hour == Decimal("0.04225")  # x 100 queries per hour
    # quality: the share of its 21 answers' 20 with a fact that state it, never the report's nDCG
    assert mini.fact_stated_rate == 0.8 and mini.fact_questions == 20 and mini.answers == 21
    assert mini.answered_as == ("gpt-4o-mini-2024-07-18",) and mini.report.endswith("mini.json")
    assert mini.quality_per_dollar == round(0.8 / 0.0004225, 2) and not mini.tokens_estimated
    assert mini.answer_calls == 2 and mini.input_tokens_per_query == 2000 and mini.output_tokens_per_query == 200
    assert demo.fact_stated_rate == 0.75 and demo.answer_calls == 1
    assert demo.answered_as == ("fixture-grounded-demo-answerer",)  # a fixture wrote them, and it says so
    assert demo.tokens_estimated and any(n.startswith("cost estimated: 1 of its answer calls") for n in demo.notes)
    # demo-chat: its 550 recorded tokens at demo_replay's machine-time rate (local_cost), not the pricing file
    assert demo.generation_cost_per_query == _replay_rate().cost(latency_ms=0, tokens=550).normalize()
    assert demo.cost_per_query == demo.generation_cost_per_query + Decimal("0.00001")
    assert demo.quality_per_dollar == round(0.75 / float(demo.cost_per_query), 2)
    assert demo.priced_by == "fixture machine 0.10 USD/h @ 60 tok/s" and mini.priced_by == "pricing file gpt-4o-mini"
    assert any(n.startswith("priced by machine time 0.10 USD/h at 60 tokens/s = 0.462963 USD") for n in demo.notes)
    assert demo.default  # demo-chat is the configured default
    local = rows["local-chat"]  # configured, never measured, no report: said so, not zero
    assert local.cost_per_query is None and any("no answer calls" in n for n in local.notes)
    assert local.priced_by == "machine 0.10 USD/h x s"
    assert "priced by machine time 0.10 USD/h x measured seconds (machine-2026-12-04)" in local.notes
    assert any("no eval report" in n for n in local.notes)
    # extraction and indexing spend apart from query spend
    assert table.spend_totals["extraction"] == Decimal("0.002")
    assert table.spend_totals["query"] == Decimal("0.000135") + Decimal("0.00063") + Decimal("0.00002")
    assert table.spend_totals["index"] == Decimal("0")
    extraction = [s for s in table.spend if s.kind == "extraction"]
    assert {(s.provider, s.unknown_cost_calls) for s in extraction} == {("openai", 0), ("demo_replay", 1)}


def test_by_model_on_sqlite(setup, tmp_path):
    cfg_path, _ = setup
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    _fill(url)
    _check_table(cfg_path, url)


@pytest.mark.postgres
def test_by_model_on_postgres(setup, fresh_pg_url):
    cfg_path, _ = setup
    _fill(fresh_pg_url)
    assert UsageLedger(fresh_pg_url).dialect == "postgresql"
    _check_table(cfg_path, fresh_pg_url)


def test_cli_costs_by_model_text_and_json(setup, tmp_path):
    cfg_path, _ = setup
    env = {"RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}"}
    _fill(env["RAG_LEDGER_URL"])
    res = rag("--config", str(cfg_path), "costs", "--by-model", env=env)
    assert res.exit_code == 0, res.output
    text = res.stdout
    assert "quality per dollar by generation model" in text and "1,893" in text  # facts stated per $
    assert "answered" in text and "nDCG" not in text  # who wrote the answers; no retrieval figure
    assert "est." in text  # demo-chat's cost rests on a fixture's made-up token counts
    assert "machine 0.10 USD/h @ 60 tok/s" in text and "pricing file gpt-4o-mini" in text
    assert "demo-chat: priced by machine time 0.10 USD/h at 60 tokens/s" in text
    assert "recorded spend by purpose" in text and "graph_extraction" in text
    res = rag("--config", str(cfg_path), "costs", "--by-model", "--json", env=env)
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    mini = next(r for r in data["rows"] if r["model"] == "gpt-4o-mini")
    assert mini["cost_per_query"] == "0.0004225" and mini["cost_per_hour"] == "0.04225"
    demo = next(r for r in data["rows"] if r["model"] == "demo-chat")
    assert Decimal(demo["cost_per_query"]) > 0 and demo["priced_by"].startswith("fixture machine ")
    assert demo["tokens_estimated"] is True and demo["fact_stated_rate"] == 0.75
    assert demo["answered_as"] == ["fixture-grounded-demo-answerer"]
    assert data["spend_totals"]["extraction"] == "0.002"
    res = rag("--config", str(cfg_path), "costs", "--by-model", "--run-id", "x", "--json", env=env)
    assert res.exit_code == 2


def test_a_model_without_answer_calls_is_priced_on_the_default_models_tokens(setup, tmp_path):
    """A hosted model never called here: its cost per query is projected from the default model's
    answers to the same prompts, at its own price, and marked as a projection; a model priced by the
    second cannot be projected (its speed is unknown)."""
    cfg_path, _ = setup
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    ledger = UsageLedger(url)
    for rec in (_use("answer", DEMO, 500, 50, "0.0003"), _use("query", EMBED, 12, 0, "0.00001")):
        ledger.record(rec)
    ledger.dispose()
    table = by_model(load_config(cfg_path), ROOT, url)
    rows = {r.model: r for r in table.rows}
    mini = rows["gpt-4o-mini"]
    assert mini.answer_calls == 0 and mini.tokens_projected_from == "demo-chat"
    assert (mini.input_tokens_per_query, mini.output_tokens_per_query) == (500, 50)
    assert mini.generation_cost_per_query == Decimal("0.000105")  # (500 x 0.15 + 50 x 0.60) / 1e6
    assert mini.cost_per_query == Decimal("0.000115") and mini.quality_per_dollar == round(0.8 / 0.000115, 2)
    assert any("projected from demo-chat's 1 answer calls on the same prompts" in n for n in mini.notes)
    assert rows["local-chat"].cost_per_query is None and rows["local-chat"].tokens_projected_from is None
    text = "\n".join(str(part) for part in render(table)[1:2])
    assert "~ projected" in text


def test_render_has_the_extractive_row_when_a_report_has_no_model(setup, tmp_path):
    cfg_path, reports = setup
    _report(reports / "extractive.json", "none", "extractive", 0.7, datetime.now(UTC))
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    _fill(url)
    table = by_model(load_config(cfg_path), ROOT, url)
    row = next(r for r in table.rows if r.model == "extractive (no model)")
    assert row.generation_cost_per_query == 0 and row.cost_per_query == Decimal("0.00001")
    assert row.fact_stated_rate == 0.7 and row.answered_as == ()
    assert len(render(table)) == 4


# -- Dagster: usage_costs by model, and the audit trail per day ------------------------------------


def _defs(cfg_path: Path, monkeypatch, env: dict[str, str]) -> dg.Definitions:
    from rag_assets.definitions import build_definitions

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return build_definitions(str(cfg_path))


def test_usage_costs_asset_by_model(setup, tmp_path, monkeypatch):
    cfg_path, _ = setup
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    _fill(url)
    defs = _defs(cfg_path, monkeypatch, {"RAG_LEDGER_URL": url})
    result = dg.materialize([defs.resolve_assets_def("usage_costs")])
    meta = result.asset_materializations_for_node("usage_costs")[0].metadata
    rows = {r.data["model"]: r.data for r in meta["by_model"].value.records}
    assert rows["gpt-4o-mini"]["cost_per_query_usd"] == pytest.approx(0.0004225)
    demo = float(_replay_rate().cost(latency_ms=0, tokens=550)) + 0.00001
    # costs are shown rounded (six significant digits, usage.shown_cost); `rag costs --json` is exact
    assert rows["demo-chat (default)"]["cost_per_query_usd"] == pytest.approx(demo, rel=1e-5)
    assert "no price for" not in rows["demo-chat (default)"]["note"]
    assert meta["extraction_spend_usd"].value == pytest.approx(0.002)
    assert meta["query_spend_usd"].value == pytest.approx(0.000785)


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_audit_daily_summary_asset(backend, setup, tmp_path, monkeypatch, request):
    cfg_path, _ = setup
    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}" if backend == "sqlite" else request.getfixturevalue("fresh_pg_url")
    trail = AuditTrail(url)
    now = datetime.now(UTC)
    yesterday = now - timedelta(days=1)
    trail.append(
        *[AuditRecord(created_at=yesterday, event="query", role="public") for _ in range(3)],
        AuditRecord(created_at=yesterday, event="collections_blocked", role="public"),
        AuditRecord(created_at=yesterday, event="generation_fallback", role="public"),
        AuditRecord(created_at=yesterday, event="generation_fallback", role="public"),
        AuditRecord(created_at=now, event="query", role="employee"),
        AuditRecord(created_at=now, event="collections_blocked", role="employee"),
        AuditRecord(created_at=now - timedelta(days=90), event="collections_blocked"),  # outside the window
        AuditRecord(created_at=now, event="approval_granted", actor="jane"),  # not counted
    )
    trail.dispose()
    defs = _defs(cfg_path, monkeypatch, {"RAG_LEDGER_URL": url})
    result = dg.materialize([defs.resolve_assets_def("audit_daily_summary")])
    meta = result.asset_materializations_for_node("audit_daily_summary")[0].metadata
    assert meta["query_yesterday"].value == 3 and isinstance(meta["query_yesterday"].value, int)
    assert meta["collections_blocked_yesterday"].value == 1
    assert meta["generation_fallback_yesterday"].value == 2
    assert meta["collections_blocked_30d"].value == 2 and meta["query_30d"].value == 4
    days = {r.data["day"]: r.data for r in meta["per_day"].value.records}
    assert len(days) == 30
    assert days[now.date().isoformat()]["collections_blocked"] == 1
    assert days[yesterday.date().isoformat()]["generation_fallback"] == 2


# -- the provider swap dry run: the candidate's row beside the current one -------------------------


def test_swap_dry_run_shows_both_rows_when_both_have_reports(variant, tmp_path):
    from rag_engine.ops.swap.dry_run import dry_run
    from rag_engine.ops.swap.render import render_text
    from tests.providers.test_swap import FAKE_DIM, _endpoints, _engine
    from tests.support.fake_openai import FakeOpenAI

    reports = tmp_path / "reports"
    reports.mkdir()
    _report(reports / "demo.json", *DEMO, 0.75, datetime.now(UTC))
    _fill(f"sqlite:///{tmp_path / 'ledger.sqlite'}")  # the ledger _engine uses

    def edit(fake_url: str):
        def inner(text: str) -> str:
            text = _endpoints(fake_url, fake_url)(text)
            return text.replace("report_dirs: [evals/reports, var/eval]", f"report_dirs: [{reports}]")

        return inner

    with FakeOpenAI(dimension=FAKE_DIM) as fake:
        path = variant("qpd-swap", edit=edit(fake.base_url))
        eng = _engine(path, tmp_path, OPENAI_API_KEY="sk-test-not-a-secret")
        only_current = dry_run(eng, role="generation", candidate="gpt-4o-mini", config_path=path)
        current, candidate = only_current.quality_per_dollar  # both rows: the candidate's quality unknown
        assert current.quality_per_dollar is not None and candidate.quality_per_dollar is None
        assert candidate.cost_per_query == Decimal("0.0004225")  # its price and measured tokens are known
        assert any("no eval report answered by gpt-4o-mini" in n for n in only_current.notes)
        _report(reports / "mini.json", *OPENAI, 0.8, datetime.now(UTC))
        report = dry_run(eng, role="generation", candidate="gpt-4o-mini", config_path=path)
        eng.close()
    current, candidate = report.quality_per_dollar
    assert (current.model, candidate.model) == ("demo-chat", "gpt-4o-mini")
    assert current.cost_per_query is not None and candidate.cost_per_query == Decimal("0.0004225")
    text = render_text(report)
    assert "quality per dollar (current, then candidate):" in text and "1,893" in text
    assert "machine 0.10 USD/h @ 60 tok/s" in text  # how demo-chat is priced, beside the file's price
    assert "candidate: gpt-4o-mini input 0.15, cached input 0.075, output 0.60 USD per million tokens" in text


def test_a_report_with_failed_model_calls_does_not_set_the_quality(tmp_path):
    """Answers the extractive fallback gave (e.g. ReplayMiss) do not measure the model: the gate
    refuses such a report (generation_failed) and the quality column skips it for an older clean one."""
    from rag_engine.ops.eval_quality import latest_reports

    reports = tmp_path / "reports"
    reports.mkdir()
    _report(reports / "clean.json", *DEMO, stated=0.8, at=datetime(2026, 11, 1, tzinfo=UTC))
    _report(reports / "fallbacks.json", *DEMO, stated=0.7, at=datetime(2026, 11, 2, tzinfo=UTC))
    data = json.loads((reports / "fallbacks.json").read_text())
    data["generation"].update(failed=41, failures={"ReplayMiss": 41})
    (reports / "fallbacks.json").write_text(json.dumps(data), encoding="utf-8")
    cfg = load_config(ROOT / "config" / "engine.yaml")
    cfg = cfg.model_copy(update={"costs": cfg.costs.model_copy(update={"report_dirs": (str(reports),)})})
    cfg = cfg.model_copy(update={"evals": cfg.evals.model_copy(update={"reports_dir": str(reports)})})
    newest = latest_reports(cfg, ROOT)
    assert newest[DEMO].path.endswith("clean.json") and newest[DEMO].fact_stated_rate == 0.8


def test_quality_pairs_each_answer_with_the_model_that_wrote_it(tmp_path):
    """One report, two answerers: the questions the model answered rate the model, the ones the
    engine answered extractively (no recording, no model) rate the extractive answer; answers decided
    before any call and failed calls rate nobody."""
    from rag_engine.ops.eval_quality import EXTRACTIVE, latest_reports

    reports = tmp_path / "reports"
    reports.mkdir()
    queries = [
        *({"id": f"m{i}", "answer_method": "model", "fact_stated": i < 3} for i in range(4)),
        *({"id": f"x{i}", "answer_method": "extractive", "fact_stated": i < 1} for i in range(5)),
        {"id": "failed", "answer_method": "extractive", "answer_error": "ProviderTimeout", "fact_stated": True},
        {"id": "none", "answer_method": "none", "fact_stated": False},
    ]
    report = {
        "schema": "rag-eval-report/2",
        "created_at": "2026-12-01T00:00:00+00:00",
        "generation": {"provider": DEMO[0], "model": DEMO[1], "reported_models": ["fixture-grounded-demo-answerer"]},
        "queries": queries,
    }
    (reports / "mixed.json").write_text(json.dumps(report), encoding="utf-8")
    cfg = load_config(ROOT / "config" / "engine.yaml")
    cfg = cfg.model_copy(update={"costs": cfg.costs.model_copy(update={"report_dirs": (str(reports),)})})
    cfg = cfg.model_copy(update={"evals": cfg.evals.model_copy(update={"reports_dir": str(reports)})})
    newest = latest_reports(cfg, ROOT)
    model, extractive = newest[DEMO], newest[EXTRACTIVE]
    assert (model.answers, model.fact_questions, model.fact_stated_rate) == (4, 4, 0.75)
    assert model.answered_as == ("fixture-grounded-demo-answerer",)
    assert (extractive.answers, extractive.fact_questions, extractive.fact_stated_rate) == (5, 5, 0.2)
