"""A blue/green `rag reindex` to another embedder while the query service answers: the service
follows the active index, never a 500 for every caller.

Two services run over the test store at once, both configured with the suite's embedder (A) and
queried by a few clients each: one also configures the built-in ``hash-embed-384`` (B, no
server), the other does not. A re-index switches the store to B under their load. Then: zero
5xx from either; the first embeds questions with B and says ``ok (following ...)`` in its health;
the second answers from the other legs with an ``index_embedder_unavailable`` event and a
``degraded`` health. The store is switched back to A afterwards (as tests/test_reindex.py does).
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from rag_engine.config import PrincipalConfig, ServingConfig
from rag_engine.engine import Engine
from rag_engine.governance.approvals import REINDEX_CUTOVER, Approval
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.ingest.reindex import cutover_plan, run_reindex
from rag_engine.serving.app import create_app
from rag_engine.store import schema
from tests.conftest import ROOT
from tests.serving_support import APP_KEY, APP_KEY_ENV, bearer, running, sha
from tests.support.packs import POLICY, RUNBOOK, temp_pack
from tests.test_reindex import engines_a_b

QUESTION = "Who approves a change to the policy?"


def _service_engine(a: Engine, *, keep: str | None, drop: str | None) -> Engine:
    """A's config with one principal (public and employee roles), without the model ``drop``."""
    serving = ServingConfig(
        principals=(PrincipalConfig(id="app", roles=("employee", "public"), key_sha256_env=APP_KEY_ENV),),
        limits=a.cfg.serving.limits.model_copy(update={"requests_per_minute": 1_000_000, "burst": 100_000}),
    )
    models = tuple(m for m in a.cfg.models if m.name != drop)
    assert keep is None or any(m.name == keep for m in models)
    return Engine(a.cfg.model_copy(update={"serving": serving, "models": models}), ROOT)


def _load(url: str, stop: threading.Event, statuses: list[tuple[float, int, dict]]) -> None:
    with httpx.Client(headers=bearer(APP_KEY), timeout=60) as http:
        n = 0
        while not stop.is_set():
            n += 1
            path, body = (
                ("/v1/retrieve", {"question": f"{QUESTION} ({n})", "role": "employee"})
                if n % 2
                else ("/v1/query", {"question": f"{QUESTION} ({n})", "role": "employee", "generate": False})
            )
            r = http.post(f"{url}{path}", json=body)
            statuses.append((time.monotonic(), r.status_code, r.json()))


def test_a_reindex_to_another_embedder_under_load_gives_no_5xx(
    base_config, tmp_path, monkeypatch, unique, neo4j_driver
):
    monkeypatch.setenv(APP_KEY_ENV, sha(APP_KEY))
    a, b = engines_a_b(base_config, tmp_path)
    if b.registry.embedding.name != "hash-embed-384":
        a.close()
        b.close()
        pytest.skip("the suite's embedder is the hash embedder: no other built-in embedder to switch to")
    pack = temp_pack(a, unique, tmp_path / "corpus", {"policy.md": POLICY, "runbook.md": RUNBOOK})
    ingest_pack(a, pack, extract=False)
    following = _service_engine(a, keep="hash-embed-384", drop=None)
    lexical = _service_engine(a, keep=None, drop="hash-embed-384")
    stop = threading.Event()
    seen: dict[str, list[tuple[float, int, dict]]] = {"following": [], "lexical": []}
    switched_at = 0.0
    try:
        with running(create_app(following)) as url_f, running(create_app(lexical)) as url_l:
            urls = {"following": url_f, "lexical": url_l}
            assert httpx.get(f"{url_f}/v1/health", timeout=30).json()["index"] == "ok"
            clients = [
                threading.Thread(target=_load, args=(urls[name], stop, seen[name])) for name in urls for _ in range(2)
            ]
            for t in clients:
                t.start()
            time.sleep(1.5)
            report = run_reindex(
                b,
                drop_old=False,
                approval=Approval.grant(REINDEX_CUTOVER, cutover_plan(b) or {}, approved_by="t", reason="t"),
            )
            assert report.status == "switched", report
            switched_at = time.monotonic()
            time.sleep(3)
            stop.set()
            for t in clients:
                t.join(timeout=120)
            health = {name: httpx.get(f"{u}/v1/health", timeout=30).json() for name, u in urls.items()}
    finally:
        stop.set()
        back = run_reindex(
            a,
            drop_old=True,
            approval=Approval.grant(REINDEX_CUTOVER, cutover_plan(a) or {}, approved_by="t", reason="t"),
        )
        following.close()
        lexical.close()
        a.close()
        b.close()
    assert back.status == "switched"
    assert schema.current_embedder(neo4j_driver, a.database)["identity"] == a.embedder_identity
    for name, samples in seen.items():
        after = [s for s in samples if s[0] > switched_at]
        assert after, f"{name}: no request after the switch"
        errors = [(code, body) for _, code, body in samples if code >= 500]
        assert not errors, f"{name}: {len(errors)} of {len(samples)} 5xx, first {errors[0]}"
        assert {code for _, code, _ in samples} == {200}, {code for _, code, _ in samples}
    # the one that configures B follows it: no degraded event, its health says which embedder
    late = [body for t, _, body in seen["following"] if t > switched_at + 1.5]
    assert late and not any(e.get("event") == "index_embedder_unavailable" for b_ in late for e in b_["events"])
    assert health["following"]["status"] == "ok" and "following" in health["following"]["index"], health
    # the one that does not: the other legs, said in each response and in its health
    late = [body for t, _, body in seen["lexical"] if t > switched_at + 1.5]
    assert late and all(any(e.get("event") == "index_embedder_unavailable" for e in b_["events"]) for b_ in late)
    assert health["lexical"]["status"] == "degraded" and "no dense leg" in health["lexical"]["index"], health
