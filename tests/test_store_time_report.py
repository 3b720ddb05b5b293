"""How the store's share of a question's time is shown: ``rag query``'s trace line and the query
benchmark's stage table (pure functions, no services)."""

from __future__ import annotations

from evals.bench.query import render_stages
from rag_engine.cli.render import _in_store


def test_the_trace_line_names_the_store_time_of_a_step_that_spent_any():
    assert _in_store({"step": "rerank", "ms": 7.48, "store_ms": 3.2}) == " (store 3.2ms)"
    assert _in_store({"step": "fusion", "ms": 0.9, "store_ms": 0.0}) == ""
    assert _in_store({"step": "policy_gate", "ms": 0.04}) == ""


def test_the_stage_table_splits_each_step_and_the_engine_against_the_budget():
    result = {
        "size": 10_000,
        "repeats": [{"engine_mean": 20.0, "raw_mean": 10.0}, {"engine_mean": 22.0, "raw_mean": 11.0}],
        "stages": {"policy_gate": [0.04, 0.04], "lexical": [9.0, 9.2], "rerank": [7.0, 7.4]},
        "store": {"lexical": [8.8, 9.0], "rerank": [3.0, 3.2], "statements": [12.0, 12.4], "statement_count": [2, 3]},
        "trivial_ms": [0.41, 0.69],
    }
    lines = render_stages(result).splitlines()
    assert lines[0] == "10000 chunks: engine - raw = 10.5 ms mean per question"
    assert "policy_gate | 0.04 | - | 0%" in lines
    assert "lexical | 9.10 | 8.90 | 87%" in lines
    assert "rerank | 7.20 | 3.10 | 69%" in lines
    assert any(
        line.startswith("engine 21.0 ms mean: 12.2 in 2.5 store statements, 8.8 outside them")
        and line.endswith("1.2x of the raw query's 10.5 ms is 12.6")
        for line in lines
    ), lines
    assert lines[-1].startswith("one trivial statement (RETURN 1) in an open read transaction: 0.41 / 0.69 ms")


def test_a_result_without_store_figures_still_renders():
    # a JSON written before the store split, read back
    result = {"size": 1000, "repeats": [{"engine_mean": 5.0, "raw_mean": 5.0}], "stages": {"lexical": [4.0]}}
    assert render_stages(result).splitlines()[-1] == "lexical | 4.00 | - | -"
