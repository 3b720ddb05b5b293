"""Per-query metrics on hand-computed examples, aggregation, and the report file contract."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from evals.metrics import (
    aggregate,
    average_precision_at_k,
    citation_hit,
    insufficient_correct,
    mean_cost,
    ndcg_at_k,
    recall_at_k,
    reciprocal_rank,
    score_query,
    system_metrics,
)
from evals.report import SCHEMA, SCHEMA_V1, EvalReport, dump_report, load_report, parse_report, report_sha256
from rag_engine.errors import EvalInputError, RagError


def test_ndcg_binary_gains_hand_computed():
    # hits at ranks 2 and 4; ideal: 3 gold -> ranks 1..3
    # DCG = 1/log2(3) + 1/log2(5) = 1.0616063; IDCG = 1 + 1/log2(3) + 1/2 = 2.1309298
    assert ndcg_at_k(["x", "g1", "y", "g2"], ["g1", "g2", "g3"]) == pytest.approx(0.49818925746641285, abs=1e-12)
    assert ndcg_at_k(["g1"], ["g1"]) == 1.0
    assert ndcg_at_k(["x", "y"], ["g1"]) == 0.0
    # a gold anchor ranked twice is one hit: 1.5 / (1 + 1/log2(3))
    assert ndcg_at_k(["g1", "g1", "g2"], ["g1", "g2"]) == pytest.approx(0.9197207891481876, abs=1e-12)
    # ideal is capped at 10 hits: 12 gold, the top 10 all gold -> perfect
    gold = [f"g{i}" for i in range(12)]
    assert ndcg_at_k(gold[:10], gold) == pytest.approx(1.0)
    # only the top 10 counts
    assert ndcg_at_k([f"x{i}" for i in range(10)] + ["g1"], ["g1"]) == 0.0


def test_average_precision_hand_computed():
    # hits at ranks 2 and 4 of 3 gold: (1/2 + 2/4) / 3
    assert average_precision_at_k(["x", "g1", "y", "g2"], ["g1", "g2", "g3"]) == pytest.approx(1 / 3, abs=1e-12)
    assert average_precision_at_k(["g1", "g2"], ["g1", "g2"]) == 1.0
    assert average_precision_at_k(["g2", "x", "g1"], ["g1", "g2"]) == pytest.approx((1 + 2 / 3) / 2, abs=1e-12)
    assert average_precision_at_k(["x", "y"], ["g1"]) == 0.0
    # a gold anchor ranked twice is one hit; the repeat still takes rank 2: (1/1 + 2/3) / 2
    assert average_precision_at_k(["g1", "g1", "g2"], ["g1", "g2"]) == pytest.approx(5 / 6, abs=1e-12)
    # duplicates in gold count once: one distinct gold anchor found at rank 1
    assert average_precision_at_k(["g1"], ["g1", "g1"]) == 1.0
    # normalised by min(|gold|, 10): 12 gold with a top 10 of gold is perfect
    gold = [f"g{i}" for i in range(12)]
    assert average_precision_at_k(gold[:10], gold) == pytest.approx(1.0)
    # only the top k counts
    assert average_precision_at_k([f"x{i}" for i in range(10)] + ["g1"], ["g1"]) == 0.0
    assert average_precision_at_k(["x", "g1"], ["g1"], k=1) == 0.0
    with pytest.raises(EvalInputError):
        average_precision_at_k(["g1"], [])


def test_system_metrics_means_over_answerable_queries():
    rows = [(["g1", "x"], ["g1"], False), (["x", "g2"], ["g2"], False), (["a"], [], True)]
    m = system_metrics(rows)
    assert m["queries"] == 2
    assert m["map@10"] == pytest.approx((1 + 0.5) / 2) and m["mrr@10"] == pytest.approx(0.75)
    assert m["recall@1"] == 0.5 and m["recall@10"] == 1.0
    assert system_metrics([(["a"], [], True)])["ndcg@10"] is None


def test_recall_and_reciprocal_rank():
    ranked = ["a", "g1", "b", "c", "d", "g2", "e"]
    gold = ["g1", "g2", "g3", "g4"]
    assert recall_at_k(ranked, gold, 1) == 0.0
    assert recall_at_k(ranked, gold, 5) == 0.25
    assert recall_at_k(ranked, gold, 10) == 0.5
    assert recall_at_k(["g1", "g1"], ["g1", "g2"], 5) == 0.5  # duplicates count once
    assert reciprocal_rank(ranked, gold) == 0.5
    assert reciprocal_rank(["a"] * 10 + ["g1"], gold) == 0.0  # outside the top 10
    with pytest.raises(EvalInputError):
        recall_at_k(ranked, [], 5)
    with pytest.raises(EvalInputError):
        recall_at_k(ranked, gold, 0)


def test_citation_hit_and_insufficient_correct():
    assert citation_hit(["g1", "x"], ["g1"], expect_insufficient=False) == 1.0
    assert citation_hit(["x"], ["g1"], expect_insufficient=False) == 0.0
    assert citation_hit([], ["g1"], expect_insufficient=False) == 0.0  # uncited answer is a miss
    assert citation_hit(["x"], [], expect_insufficient=True) is None
    assert insufficient_correct(True, True) == 1.0
    assert insufficient_correct(False, False) == 1.0
    assert insufficient_correct(True, False) == 0.0
    assert insufficient_correct(False, True) == 0.0


def test_score_query_nulls_ranking_metrics_for_expected_insufficient():
    q = score_query(
        id="q1",
        pack="p",
        question="?",
        gold=[],
        expect_insufficient=True,
        ranked=["a", "b"],
        cited=[],
        answered_insufficient=True,
        latency_ms=3.0,
        cost_usd=None,
    )
    assert q.value("ndcg@10") is None and q.value("recall@5") is None and q.value("citation_hit_rate") is None
    assert q.value("map@10") is None
    assert q.value("insufficient_evidence_accuracy") == 1.0
    with pytest.raises(EvalInputError, match="no gold"):
        score_query(
            id="q2",
            pack="p",
            question="?",
            gold=[],
            expect_insufficient=False,
            ranked=[],
            cited=[],
            answered_insufficient=False,
            latency_ms=1.0,
            cost_usd=None,
        )


def test_score_query_keeps_top_10_and_scores():
    ranked = [f"x{i}" for i in range(12)]
    ranked[2] = "g"
    q = score_query(
        id="q",
        pack="p",
        question="?",
        gold=["g"],
        expect_insufficient=False,
        ranked=ranked,
        cited=["g"],
        answered_insufficient=False,
        latency_ms=1.0,
        cost_usd="0.001",
    )
    assert len(q.ranked) == 10
    assert (q.value("recall@1"), q.value("recall@5"), q.value("mrr@10")) == (0.0, 1.0, pytest.approx(1 / 3))
    assert q.value("map@10") == pytest.approx(1 / 3)
    assert q.citation_hit == 1.0 and q.cost_usd == "0.001"


def _q(i: int, *, rank: int | None, latency: float, cost: str | None, insufficient: bool = False):
    gold = [] if insufficient else [f"d{i}#a"]
    ranked = [f"other{j}" for j in range(10)]
    if rank is not None and not insufficient:
        ranked[rank - 1] = gold[0]
    return score_query(
        id=f"q{i}",
        pack="p",
        question=f"question {i}",
        gold=gold,
        expect_insufficient=insufficient,
        ranked=ranked,
        cited=gold if rank else [],
        answered_insufficient=insufficient,
        latency_ms=latency,
        cost_usd=cost,
    )


def test_aggregate_means_over_non_null_percentiles_and_exact_cost():
    qs = [
        _q(1, rank=1, latency=10, cost="0.001"),
        _q(2, rank=2, latency=20, cost="0.002"),
        _q(3, rank=None, latency=30, cost="0.0005"),
        _q(4, rank=None, latency=40, cost="0", insufficient=True),
    ]
    m = aggregate(qs)
    assert m["recall@1"] == pytest.approx(1 / 3)  # q4 has no value; it is not a zero
    assert m["mrr@10"] == pytest.approx((1 + 0.5 + 0) / 3)
    assert m["map@10"] == pytest.approx((1 + 0.5 + 0) / 3)  # one gold each: AP = reciprocal rank
    assert m["citation_hit_rate"] == pytest.approx(2 / 3)
    assert m["insufficient_evidence_accuracy"] == 1.0
    assert m["latency_ms_p50"] == 25.0
    assert m["latency_ms_p95"] == pytest.approx(38.5)  # linear: 30 + 0.85 * 10
    assert m["cost_per_query_usd"] == "0.000875"  # 0.0035 / 4, exact
    assert m["queries"] == 4


def test_cost_unknown_if_any_query_cost_unknown():
    assert mean_cost(["0.001", None]) is None
    assert mean_cost([]) is None
    assert mean_cost(["0", "0"]) == "0"
    assert mean_cost(["1", "0", "0"]) == "0.333333333333"  # rounded half-even to 1e-12


def test_aggregate_rejects_empty():
    with pytest.raises(EvalInputError):
        aggregate([])


# -- report files ---------------------------------------------------------------------------


def _systems(qs) -> dict:
    rows = [(q.ranked, q.gold, q.expect_insufficient) for q in qs]
    table = system_metrics(rows)
    return {"p": {"engine": table, "bm25": table, "fulltext": table, "dense": table}}


def _report_dict() -> dict:
    qs = [_q(i, rank=1, latency=5.0, cost=None) for i in range(3)]
    return {
        "schema": SCHEMA,
        "created_at": "2025-01-01T00:00:00+00:00",
        "config_hash": "abc123",
        "golden": {"paths": ["packs/x/golden/queries.yaml"], "hash": "0" * 64},
        "generation": {"provider": "demo_replay", "model": "demo-chat"},
        "embedder": {"provider": "local_hash", "model": "hash-embed-384", "dimension": 384, "identity": "h/384"},
        "reindex": None,
        "metrics": aggregate(qs),
        "queries": [q.model_dump(mode="json", by_alias=True) for q in qs],
        "retrieval": {"weights": {"exact": 1.0, "lexical": 1.0, "dense": 0.0}, "k": None},
        "systems": _systems(qs),
        "rankings": {q.id: {"bm25": list(q.ranked), "fulltext": [], "dense": []} for q in qs},
    }


def _v1_dict() -> dict:
    """A report as the schema-1 runner wrote it: no map@10, no systems table."""
    data = _report_dict()
    data["schema"] = SCHEMA_V1
    for key in ("retrieval", "systems", "rankings"):
        del data[key]
    del data["metrics"]["map@10"]
    for q in data["queries"]:
        del q["map@10"]
    return data


def test_report_round_trip_keeps_json_key_names(tmp_path):
    report = parse_report(_report_dict())
    path = dump_report(report, tmp_path / "r.json")
    raw = json.loads(path.read_text())
    assert raw["schema"] == "rag-eval-report/2"
    assert "ndcg@10" in raw["metrics"] and "recall@5" in raw["queries"][0]
    assert "map@10" in raw["metrics"] and "map@10" in raw["queries"][0]
    assert raw["systems"]["p"]["bm25"]["map@10"] == 1.0 and raw["retrieval"]["weights"]["dense"] == 0.0
    assert load_report(path) == report
    assert len(report_sha256(path)) == 64
    with pytest.raises(ValidationError, match="frozen"):
        report.config_hash = "other"  # type: ignore[misc]
    with pytest.raises(ValidationError, match="frozen"):
        report.metrics.queries = 9  # type: ignore[misc]


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "not found"),
        ("{not json", "not valid JSON"),
        ('["a list"]', "must be a JSON object"),
        ('{"schema": "something-else/2"}', "schema is 'something-else/2'"),
        ('{"schema": "rag-eval-report/3"}', "schema is 'rag-eval-report/3'"),
    ],
)
def test_load_report_clear_errors(tmp_path, content, match):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(EvalInputError, match=match) as info:
        load_report(path)
    assert isinstance(info.value, RagError)


def test_load_report_names_bad_fields(tmp_path):
    data = _report_dict()
    data["metrics"]["ndcg@10"] = 1.5
    data["queries"][0]["surprise"] = 1
    data["queries"][1]["id"] = data["queries"][2]["id"]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(data))
    with pytest.raises(EvalInputError) as info:
        load_report(path)
    text = str(info.value)
    assert "metrics.ndcg@10" in text and "queries.0.surprise: unknown key" in text


def test_report_rejects_inconsistent_content():
    data = _report_dict()
    data["queries"][1]["id"] = data["queries"][0]["id"]
    with pytest.raises(EvalInputError, match="duplicate query ids"):
        parse_report(data)
    data = _report_dict()
    data["metrics"]["queries"] = 7
    with pytest.raises(EvalInputError, match=r"metrics\.queries"):
        parse_report(data)
    data = _report_dict()
    data["queries"][0]["expect_insufficient"] = True
    with pytest.raises(EvalInputError, match="must be null"):
        parse_report(data)
    data = _report_dict()
    data["queries"][0]["cost_usd"] = "-1"
    with pytest.raises(EvalInputError, match="non-negative"):
        parse_report(data)
    assert isinstance(parse_report(_report_dict()), EvalReport)


def test_schema_1_reports_stay_readable(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_v1_dict()))
    old = load_report(path)
    assert old.schema_id == SCHEMA_V1 and old.systems is None and old.retrieval is None
    assert old.metrics.get("map@10") is None and old.queries[0].value("map@10") is None
    assert old.metrics.get("ndcg@10") == 1.0
    assert load_report(dump_report(old, tmp_path / "again.json")) == old
    data = _v1_dict()
    data["systems"] = _report_dict()["systems"]
    with pytest.raises(EvalInputError, match="belong to"):
        parse_report(data)


def test_schema_2_requires_map_and_a_consistent_systems_table():
    data = _report_dict()
    del data["systems"]
    with pytest.raises(EvalInputError, match=r"requires.*systems"):
        parse_report(data)
    data = _report_dict()
    del data["metrics"]["map@10"]
    del data["queries"][1]["map@10"]
    with pytest.raises(EvalInputError, match=r"metrics.map@10.*queries.1.map@10"):
        parse_report(data)
    data = _report_dict()
    data["systems"]["other"] = data["systems"]["p"]
    with pytest.raises(EvalInputError, match="systems covers packs"):
        parse_report(data)
    data = _report_dict()
    data["systems"]["p"]["bm25"] = {**data["systems"]["p"]["bm25"], "queries": 2}
    with pytest.raises(EvalInputError, match=r"\['bm25'\] count"):
        parse_report(data)
    data = _report_dict()
    del data["systems"]["p"]["dense"]
    with pytest.raises(EvalInputError, match=r"systems\.p\.dense"):
        parse_report(data)
    data = _report_dict()
    data["rankings"]["nope"] = {"bm25": [], "fulltext": [], "dense": []}
    with pytest.raises(EvalInputError, match="unknown query ids"):
        parse_report(data)
    data = _report_dict()
    data["rankings"]["q0"]["bm25"] = [f"a{i}" for i in range(11)]
    with pytest.raises(EvalInputError, match=r"rankings\.q0\.bm25"):
        parse_report(data)


# -- the BM25 baseline (pure: a handful of chunks, no Neo4j) --------------------------------


def test_bm25_tokenization_is_documented_behaviour():
    from evals.bm25_baseline import tokenize

    assert tokenize(["What does Article 17(1) of the GDPR-compliant Policy say?"]) == [
        ["what", "does", "article", "17", "gdpr", "compliant", "policy", "say"]
    ]  # lowercase, "of"/"the" out, "1" too short
    assert tokenize(["What does Article 17(1) say about fines?"], stem=True) == [
        ["what", "doe", "articl", "17", "say", "about", "fine"]
    ]  # the stemmed variant (bm25_stemmed): Snowball English
    assert tokenize(["The and of to"]) == [[]]
    assert tokenize([]) == []


def test_bm25_ranks_by_lucene_score_with_ties_by_anchor():
    import math

    from evals.bm25_baseline import K1, B, BM25Index, Chunk

    chunks = [
        Chunk("c#1", "Other", "nothing here"),
        Chunk("a#1", "Erasure", "right to erasure"),
        Chunk("b#1", "Access", "right of access"),
        Chunk("d#1", "Access", "right of access"),  # same text as b#1: a tie, broken by anchor
    ]
    index = BM25Index.build(chunks)
    assert [c.anchor for c in index.chunks] == ["a#1", "b#1", "c#1", "d#1"]  # corpus in anchor order
    # every document has 3 tokens (heading + text, "to"/"of" dropped), so length normalisation is 1:
    # lucene idf ln(1 + (N - df + 0.5) / (df + 0.5)) with N 4, df 1; tf 2 -> 2 / (2 + k1)
    expected = math.log(1 + 3.5 / 1.5) * 2 / (2 + K1 * (1 - B + B * 1.0))
    assert index.scores("erasure")[0] == pytest.approx(expected, rel=1e-6)
    assert index.search("erasure", 10) == ["a#1"]  # chunks scoring 0 are not ranked
    assert index.search("access rights", 10) == ["b#1", "d#1"]  # "rights" is not "right": no stemming
    # stemmed, "rights" is "right": the erasure chunk (right, not access) ranks after both access chunks
    assert BM25Index.build(chunks, stem=True).search("access rights", 10) == ["b#1", "d#1", "a#1"]
    assert index.search("right access", 10)[:2] == ["b#1", "d#1"] and index.search("right access", 1) == ["b#1"]
    assert index.search("the of", 10) == [] and index.search("unknownword", 10) == []
    assert index.search("ERASURE!", 10) == ["a#1"]  # lowercase, punctuation splits
    assert BM25Index.build([]).search("erasure", 10) == []


def test_bm25_ranks_a_duplicated_anchor_once():
    from evals.bm25_baseline import BM25Index, Chunk

    index = BM25Index.build([Chunk("a#1", "x", "alpha beta"), Chunk("a#1", "x", "alpha"), Chunk("b#1", "y", "beta")])
    assert index.search("alpha beta", 10) == ["a#1", "b#1"]


# -- ablation flags ------------------------------------------------------------------------


def test_leg_weights_from_legs_and_weights_flags():
    from evals.runner import leg_weights

    configured = {"exact": 1.0, "lexical": 1.0, "dense": 0.7}
    assert leg_weights(configured) is None
    assert leg_weights(configured, legs="lexical,dense") == {
        "exact": 0.0,
        "lexical": 1.0,
        "dense": 0.7,
        "live": 0.0,
        "graph": 0.0,
    }
    assert leg_weights(configured, weights="lexical=1,dense=0.5") == {
        "exact": 1.0,
        "lexical": 1.0,
        "dense": 0.5,
        "live": 1.0,
        "graph": 1.0,
    }
    assert leg_weights(configured, legs="dense", weights="dense=2") == {
        "exact": 0.0,
        "lexical": 0.0,
        "dense": 2.0,
        "live": 0.0,
        "graph": 0.0,
    }
    for bad in (
        {"legs": "lexical,bm25"},
        {"legs": ""},
        {"weights": "dense"},
        {"weights": "dense=-1"},
        {"weights": "dense=nan"},
        {"weights": "rerank=1"},
        {"legs": "exact", "weights": "exact=0"},
    ):
        with pytest.raises(EvalInputError):
            leg_weights(configured, **bad)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--pack", "no_such_pack"], "no golden file for it"),
        (["--legs", "lexical,bm25"], "unknown: ['bm25']"),
        (["--weights", "dense=-1"], "finite weights >= 0"),
        (["--k", "0"], "--k must be between 1"),
    ],
)
def test_runner_rejects_bad_flags_before_any_query(tmp_path, capsys, args, message):
    from evals.runner import main

    assert main(["--output", str(tmp_path / "r.json"), *args]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_exact_hits_table_counts_slots_exact_hits_and_gold_per_pack():
    from evals.run_tables import exact_hits_table

    data = _report_dict()
    data["queries"][0]["exact"] = ["d0#a", "other1"]  # the gold and another exact hit
    data["queries"][1]["exact"] = ["other3"]
    data["queries"][2]["exact"] = []
    table = exact_hits_table(parse_report(data))
    assert table.splitlines()[1].split() == ["p", "30", "3", "0.100", "1", "2"]
    # a report from an older runner records no exact hits: no row rather than a zero
    assert len(exact_hits_table(parse_report(_report_dict())).splitlines()) == 1
