"""What the automation's cost gate estimates, against what the work then does: extraction the
cache already answered costs nothing, an eval that answers extractively calls no model; and the
kind an llm_extraction asset shows is its extraction provider's."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from rag_assets.automation import eval_estimate, extraction_estimate, extraction_kinds, within_limit
from rag_assets.definitions import build_definitions
from rag_engine.engine import Engine
from rag_engine.ingest.documents import discover
from rag_engine.ingest.pipeline import ingest_pack
from tests.support.packs import POLICY, extraction_cassette
from tests.test_dagster_automation import _priced_chat

DEMO_CASSETTE = "cassette: evals/cassettes/demo.jsonl"


def with_cassette(path: Path):
    """The demo replay provider answers from ``path`` (extraction_cassette writes it)."""
    return lambda text: text.replace(DEMO_CASSETTE, f"cassette: {path}")


def _extraction_calls(engine: Engine) -> int:
    return sum(1 for r in engine.ledger.records() if r.purpose == "graph_extraction")


def test_extraction_estimate_counts_only_chunks_the_extraction_cache_does_not_hold(variant, unique, tmp_path):
    cassette = tmp_path / "cassette.jsonl"
    defs = build_definitions(variant("priced", edit=lambda s: _priced_chat(with_cassette(cassette)(s))))
    engine = defs.resources["rag"].engine()
    pack = engine.pack(unique)
    corpus = tmp_path / "corpus"
    extraction_cassette(engine, pack, cassette)  # the corpus as it is, and the edited policy below
    (corpus / "policy.md").write_text(POLICY.replace("within one hour", "within two hours"))
    extraction_cassette(engine, pack, cassette)
    (corpus / "policy.md").write_text(POLICY)

    keys = [r.partition_key for r in discover(pack)]
    before = extraction_estimate(engine, unique, keys)
    assert (before["calls"], before["cached"]) == (3, 0) and before["cost_usd"] > 0

    calls = _extraction_calls(engine)
    ingest_pack(engine, pack)  # extracts all 3 chunks (priced: ingest_pack needs no approval)
    assert _extraction_calls(engine) == calls + 3

    # the same versions again (a rules change re-runs extraction): every answer is cached
    again = extraction_estimate(engine, unique, keys)
    assert (again["calls"], again["cached"], again["input_tokens"], again["cost_usd"]) == (0, 3, 0, 0.0)
    assert again["tokens_from"] == "no calls; 3 chunks answered from the extraction cache"
    assert within_limit(engine, again)  # nothing to approve (max_auto_cost_usd 0)

    # a new version of the policy with one section changed: one call, the unchanged section cached
    (corpus / "policy.md").write_text(POLICY.replace("within one hour", "within two hours"))
    new = [r.partition_key for r in discover(pack) if r.partition_key not in keys]
    assert len(new) == 1
    changed = extraction_estimate(engine, unique, new)
    assert (changed["calls"], changed["cached"]) == (1, 1) and changed["cost_usd"] > 0
    calls = _extraction_calls(engine)
    ingest_pack(engine, pack)
    assert _extraction_calls(engine) == calls + changed["calls"]  # the run made the calls estimated


def test_eval_estimate_is_free_when_the_eval_makes_no_generation_call(variant):
    priced = build_definitions(variant("priced", edit=_priced_chat))
    engine = priced.resources["rag"].engine()
    # eval_report answers extractively: no generation call, whatever the generation model costs
    assert eval_estimate(engine) == {
        "model": "demo-chat",
        "calls": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "tokens_from": "no generation call: eval_report answers extractively (the top passage)",
        "cost_usd": 0.0,
    }
    assert priced.resolve_asset_graph().get(dg.AssetKey("eval_report")).tags["cost"] == "free"

    # an eval that answers with the (priced) model: one call per golden question
    generating = eval_estimate(engine, generate=True)
    assert generating["calls"] > 0 and generating["cost_usd"] > 0

    # no usable generation model (its client cannot be built): the query path answers extractively
    broken = variant(
        "unbuildable",
        edit=lambda s: _priced_chat(s).replace(DEMO_CASSETTE, f"{DEMO_CASSETTE}\n    record: true"),
    )
    unusable = eval_estimate(build_definitions(broken).resources["rag"].engine(), generate=True)
    assert (unusable["calls"], unusable["cost_usd"]) == (0, 0.0)
    assert unusable["tokens_from"] == (
        "no generation call: no usable generation model (demo-chat: ConfigError), answered extractively"
    )


def test_extraction_kinds_name_the_extraction_provider(variant, monkeypatch):
    def extraction(model: str, provider: str):
        enable = f"  - name: {provider}"

        def edit(text: str) -> str:
            start = text.index(enable)
            end = text.index("\n  - name:", start + 1)
            block = text[start:end].replace("enabled: false", "enabled: true")
            text = text[:start] + block + text[end:]
            return text.replace("  extraction_model: demo-chat", f"  extraction_model: {model}")

        return edit

    def kinds(name: str, edit=lambda s: s) -> set[str]:
        return extraction_kinds(build_definitions(variant(name, edit=edit)).resources["rag"].engine())

    assert kinds("replay") == {"python", "replay"}  # the shipped demo cassette
    assert kinds("local", extraction("local-chat", "local_llm")) == {"python", "openai_compatible"}
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    assert kinds("openai", extraction("gpt-4o-mini", "openai")) == {"python", "openai"}
