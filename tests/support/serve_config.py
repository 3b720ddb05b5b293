"""The config of the query service `make test` starts (tools/serve-local), and its keys.

``python -m tests.support.serve_config OUT.yaml`` writes the shipped config with three test
principals and low limits, its artifacts and embedding cache beside OUT, and prints one
``export NAME=<sha256>`` line per principal for the shell that starts the service: the service
gets the digests of the test keys, never the keys. The keys are sentinels, so a test can look for
them where they must not be.

Limits: 60 requests per minute with a burst of 5 per principal, so a handful of requests sent at
once by one principal gets a 429 (tests/test_serving_process.py); each test uses few requests of
its own principal, and a principal's burst is back within seconds for the next run.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]

APP_KEY = "SENTINEL-serve-app-key-5b0e1d7c9a3f4e2d8c6b4a29f1e0d3c7"
ANALYST_KEY = "SENTINEL-serve-analyst-key-a8c6e4f2b0d9c7e5a3f1b9d7c5e3a1f0"
THROTTLED_KEY = "SENTINEL-serve-throttled-key-3e5c7a9b1d2f4e6a8c0b2d4f6a8c0e2b"
SCRAPER_KEY = "SENTINEL-serve-scraper-key-6d4b2f0e8c6a4e2c0a8f6d4b2e0c8a6f"
"""The key a Prometheus scrape sends (``GET /metrics`` needs the operator role)."""
PRINCIPALS = {
    "svc-app": (["public"], "RAG_TEST_SERVE_APP_KEY_SHA256", APP_KEY),
    "svc-analyst": (["employee", "public"], "RAG_TEST_SERVE_ANALYST_KEY_SHA256", ANALYST_KEY),
    "svc-throttled": (["public"], "RAG_TEST_SERVE_THROTTLED_KEY_SHA256", THROTTLED_KEY),
    "svc-scraper": (["operator"], "RAG_TEST_SERVE_SCRAPER_KEY_SHA256", SCRAPER_KEY),
}
LIMITS = {"requests_per_minute": 60, "burst": 5, "shutdown_grace_seconds": 20}
SERVED_PACK = "t5e7fed0001"
"""A pack the service has enabled for the tests' own documents (only enabled packs are served): the
KB pack's rules, a corpus the tests write; named like the other test packs, so the session's
clean-up removes it from the store."""


def digest_env() -> dict[str, str]:
    """Each principal's key-digest variable and the SHA-256 of its test key."""
    return {env: hashlib.sha256(key.encode()).hexdigest() for _, env, key in PRINCIPALS.values()}


def questions_to_the_server(cfg: dict[str, Any]) -> dict[str, Any]:
    """``cfg`` (a loaded config) with every question embedded by the embedding server: no model's
    ``in_process``. For tests that cut the server and model it as the question's only path."""
    for model in cfg["models"]:
        model.pop("in_process", None)
    return cfg


def write(out: Path, limits: dict[str, Any] | None = None, *, by_server: bool = False) -> Path:
    """The config at ``out``; ``limits``: settings over the test ones (``serving.limits``);
    ``by_server``: every question embedded by the embedding server (no model's ``in_process``)."""
    cfg = yaml.safe_load((ROOT / "config" / "engine.yaml").read_text(encoding="utf-8"))
    if by_server:
        questions_to_the_server(cfg)
    cfg["storage"]["artifacts_dir"] = str(out.parent / "artifacts")
    cfg["storage"]["embedding_cache"] = str(out.parent / "embedding_cache.sqlite")
    kb = next(p for p in cfg["packs"] if p["name"] == "company_x_kb")
    corpus = out.parent / "served_corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    cfg["packs"].append({**kb, "name": SERVED_PACK, "corpus": str(corpus)})
    cfg["serving"] = {
        "principals": [
            {"id": pid, "roles": roles, "key_sha256_env": env} for pid, (roles, env, _) in PRINCIPALS.items()
        ],
        "limits": {**LIMITS, **(limits or {})},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return out


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tests.support.serve_config OUT.yaml")
    write(Path(sys.argv[1]).resolve())
    for name, digest in digest_env().items():
        print(f"export {name}={digest}")


if __name__ == "__main__":
    main()
