"""Provider swap dry run (rag_engine.ops.swap, `rag providers swap`): a hosted and a local swap
of generation and of embedding against loopback OpenAI-compatible servers (the fake one, and the
local e5 server `make test` runs), blocking reasons, the candidate-config load check, and that the
credential sentinel never reaches any output."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from rag_engine.config import config_hash, load_config
from rag_engine.engine import Engine
from rag_engine.ops.swap.dry_run import dry_run
from rag_engine.ops.swap.render import render_text
from rag_engine.ops.swap.report import SwapReport
from tests.conftest import ROOT, SENTINEL
from tests.support.cli import rag
from tests.support.fake_openai import FakeOpenAI

FAKE_DIM = 32  # the fake server's vectors are sha256 bytes: at most 32 floats


@pytest.fixture
def fake():
    with FakeOpenAI(dimension=FAKE_DIM) as srv:
        yield srv


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _endpoints(hosted: str, local: str, *, default_embedder: str = "e5-small"):
    """Edit of the variant config: the openai provider and local_llm answer on loopback."""

    def edit(text: str) -> str:
        text = text.replace(
            "    credential_env: OPENAI_API_KEY\n", f"    credential_env: OPENAI_API_KEY\n    endpoint: {hosted}\n"
        )
        text = text.replace("endpoint: http://127.0.0.1:8080/v1", f"endpoint: {local}")
        text = text.replace("    dimension: 1536\n", f"    dimension: {FAKE_DIM}\n")
        return text.replace("  embedding_model: e5-small ", f"  embedding_model: {default_embedder} ")

    return edit


def _engine(path: str, tmp_path: Path, **extra: str) -> Engine:
    env = {
        "NEO4J_URI": os.environ.get("NEO4J_URI", "bolt://127.0.0.1:7687"),
        "RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'ledger.sqlite'}",
        **extra,
    }
    if os.environ.get("RAG_EMBED_ENDPOINT"):
        env["RAG_EMBED_ENDPOINT"] = os.environ["RAG_EMBED_ENDPOINT"]
    return Engine(load_config(path), ROOT, env)


def _no_leak(report: SwapReport) -> str:
    text, data = render_text(report), report.model_dump_json()
    assert SENTINEL not in text and SENTINEL not in data
    return text


def _active(engine: Engine) -> int:
    records, _, _ = engine.driver.execute_query(
        "MATCH (c:Chunk {active: true}) RETURN count(c) AS n", database_=engine.database
    )
    return records[0]["n"]


@pytest.fixture
def ingested(variant, tmp_path, fake, unique):
    """The tiny variant pack (two documents) ingested with the configured e5 embedder, no extraction."""
    from rag_engine.ingest.pipeline import ingest_pack

    path = variant("swap", edit=_endpoints(fake.base_url, fake.base_url))
    eng = _engine(path, tmp_path)
    ingest_pack(eng, eng.pack(unique), extract=False)
    yield eng
    eng.close()


def test_hosted_generation_swap(variant, tmp_path, fake):
    path = variant("gen-hosted", edit=_endpoints(fake.base_url, fake.base_url))
    eng = _engine(path, tmp_path, OPENAI_API_KEY=SENTINEL)
    report = dry_run(eng, role="generation", candidate="gpt-4o-mini", config_path=path)
    text = _no_leak(report)
    assert report.status == "ok", report.reasons
    assert report.application_code_change_required is False and report.load_check.ok
    assert report.candidate.mode == "hosted" and report.candidate.credential_env == "OPENAI_API_KEY"
    assert report.candidate.credential_present is True
    assert report.candidate.endpoint_host == fake.base_url.split("//")[1].split("/")[0]  # host:port, no path
    assert report.current.provider == "demo_replay" and report.current.mode == "local"
    assert not report.capability_losses
    assert report.pricing_candidate.known and report.pricing_candidate.input_per_million == "0.15"
    # demo-chat (replay) is priced as this machine's time per recorded token (demo_replay's local_cost)
    assert report.pricing_current.known and report.pricing_current.pricing_version == "machine-2026-12-04-replay"
    assert report.pricing_current.input_per_million == "0.462963"
    assert [c.kind for c in report.consequences] == ["eval_required"]
    assert "--generate" in report.consequences[0].commands[0]
    assert "providers.openai.enabled: false -> true" in report.changes
    assert report.rollback.config_hash == config_hash(eng.cfg)
    assert "defaults.generation_model: demo-chat" in report.rollback.restore
    assert "status OK" in text and "OPENAI_API_KEY: present" in text
    assert not fake.requests  # a generation dry run makes no model call

    # the same swap without the credential is blocked, naming the variable only
    bare = _engine(path, tmp_path)
    blocked = dry_run(bare, role="generation", candidate="gpt-4o-mini", config_path=path)
    _no_leak(blocked)
    assert blocked.status == "blocked"
    assert any("OPENAI_API_KEY" in r and "missing credential" in r for r in blocked.reasons)
    assert blocked.application_code_change_required is False  # the code loads; the environment lacks a key


def test_local_generation_swap(variant, tmp_path, fake):
    path = variant("gen-local", edit=_endpoints(fake.base_url, fake.base_url))
    eng = _engine(path, tmp_path, OPENAI_API_KEY=SENTINEL)
    report = dry_run(eng, role="generation", candidate="local-chat", config_path=path)
    text = _no_leak(report)
    assert report.status == "ok", report.reasons
    assert report.application_code_change_required is False
    assert report.candidate.mode == "local" and report.candidate.reachable is True
    assert report.candidate.credential_env is None
    # the engine answers through a schema: without structured_output it parses tolerantly (not blocking)
    assert [(loss.capability, loss.blocking) for loss in report.capability_losses] == [("structured_output", False)]
    assert "tolerant" in text
    # local_llm is priced by each call's measured seconds: known, but no per-token price to estimate with
    assert report.pricing_candidate.known and report.pricing_candidate.input_per_million is None
    assert "measured seconds" in (report.pricing_candidate.gap or "")
    assert report.consequences[0].kind == "eval_required"

    down = variant("gen-down", edit=_endpoints(fake.base_url, f"http://127.0.0.1:{_closed_port()}/v1"))
    blocked = dry_run(_engine(down, tmp_path), role="generation", candidate="local-chat", config_path=down)
    assert blocked.status == "blocked" and any(r.startswith("unreachable local endpoint") for r in blocked.reasons)


def test_hosted_embedding_swap(ingested, tmp_path, fake):
    eng = ingested
    eng.env["OPENAI_API_KEY"] = SENTINEL  # the engine's env is a plain dict in tests
    report = dry_run(eng, role="embedding", candidate="text-embedding-3-small")
    _no_leak(report)
    assert report.status == "ok", report.reasons
    assert report.current.identity == eng.embedder_identity and report.candidate.mode == "hosted"
    (c,) = report.consequences
    assert c.kind == "reindex" and c.chunks == _active(eng) and c.chunks > 0
    assert c.rate_source.startswith("measured") and c.estimated_seconds is not None
    assert c.estimated_cost_usd is not None and c.estimated_input_tokens > 0  # priced: text-embedding-3-small
    assert f"dimension 384 -> {FAKE_DIM}" in c.summary and "rag reindex" in c.commands[0]
    assert fake.calls("/embeddings")  # the sample went through the candidate
    assert any(r.purpose == "swap_dry_run" for r in eng.ledger.records())  # and was metered
    headers = fake.calls("/embeddings")[0].headers
    assert any(k.lower() == "authorization" and v.endswith(SENTINEL) for k, v in headers.items())


def test_local_embedding_swap(ingested, variant, tmp_path, fake):
    """hash-embed-384 -> e5-small on the local e5 server (RAG_EMBED_ENDPOINT under make test)."""
    path = variant("emb-local", edit=_endpoints(fake.base_url, fake.base_url, default_embedder="hash-embed-384"))
    eng = _engine(path, tmp_path)
    report = dry_run(eng, role="embedding", candidate="e5-small", config_path=path)
    text = _no_leak(report)
    assert report.status == "ok", report.reasons
    assert report.candidate.mode == "local" and report.candidate.reachable is True
    assert report.candidate.provider == "local_embed" and report.current.provider == "local_hash"
    (c,) = report.consequences
    assert c.kind == "reindex" and c.chunks == _active(eng) and c.chunks > 0
    assert c.rate_source.startswith("measured") and c.estimated_seconds is not None
    # an embedder on our own cores costs machine time: local_embed's per-token rate (local_cost)
    assert report.pricing_candidate.known and report.pricing_candidate.input_per_million == "0.069444"
    assert report.pricing_candidate.pricing_version == "machine-2026-12-04"
    assert c.estimated_cost_usd is not None and c.estimated_input_tokens
    assert "at the candidate's rate" in c.cost_note
    assert "dimension" not in c.summary  # 384 -> 384: same dimension, another vector space
    assert "rag reindex --keep-old" in text


def test_candidate_that_does_not_load_requires_code(variant, tmp_path, fake):
    path = variant("base", edit=_endpoints(fake.base_url, fake.base_url))
    cand = variant(
        "broken",
        edit=lambda s: _endpoints(fake.base_url, fake.base_url)(s).replace(
            "module: packs.company_x_kb.pack", "module: packs.no_such_pack_module"
        ),
    )
    report = dry_run(_engine(path, tmp_path), role="generation", candidate_config=cand, config_path=path)
    assert report.application_code_change_required is True and report.status == "blocked"
    assert "no_such_pack_module" in report.load_check.error


def test_cli_swap_json_and_exit_codes(variant, tmp_path, fake):
    path = variant("cli", edit=_endpoints(fake.base_url, fake.base_url))
    env = {"RAG_LEDGER_URL": f"sqlite:///{tmp_path / 'cli-ledger.sqlite'}", "OPENAI_API_KEY": SENTINEL}
    res = rag(
        "--config", path, "providers", "swap", "--role", "generation", "--candidate", "local-chat", "--json", env=env
    )
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["status"] == "ok" and data["application_code_change_required"] is False
    assert data["candidate"]["model"] == "local-chat" and SENTINEL not in res.stdout + res.stderr
    text = rag(
        "--config",
        path,
        "providers",
        "swap",
        "--role",
        "generation",
        "--candidate",
        "gpt-4o-mini",
        env={**env, "OPENAI_API_KEY": ""},
    )
    assert text.exit_code == 1 and "OPENAI_API_KEY" in text.stdout and "status BLOCKED" in text.stdout
    bad = rag(
        "--config", path, "providers", "swap", "--role", "nonsense", "--candidate", "local-chat", "--json", env=env
    )
    assert bad.exit_code == 2 and json.loads(bad.stdout)["error"]["type"] == "ConfigError"
