"""Run the golden query packs through the query path and write an eval report.

    python -m evals.runner [--config config/engine.yaml] --output evals/reports/latest.json [--generate]

By default answers are extractive (top context chunk, cited): deterministic and free, so the CI
gate measures retrieval, citation and insufficient-evidence behaviour without a model. With
--generate the configured default generation model answers (and costs money if hosted).
The report records the golden pack hash, the embedder identity, whether the chunk index was
fully built with it, and the secret-redacted config hash.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from evals.metrics import aggregate, score_query
from evals.report import EvalReport, dump_report, golden_sha256
from rag_engine.config import config_hash
from rag_engine.engine import DEFAULT_CONFIG, Engine
from rag_engine.errors import EvalInputError
from rag_engine.query import run_query
from rag_engine.retrieval.store_reads import read


def load_golden(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise EvalInputError(f"golden file {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("queries"), list) or "pack" not in data:
        raise EvalInputError(f"golden file {path}: needs 'pack' and a 'queries' list")
    return data


def default_role(engine: Engine, pack_name: str) -> str:
    """The first configured role that may read every collection of the pack."""
    needed = set(engine.pack(pack_name).manifest.collections)
    for role, collections in engine.cfg.roles.items():
        if needed <= set(collections):
            return role
    raise EvalInputError(f"no configured role can read all collections of pack {pack_name!r}")


def reindex_info(engine: Engine) -> dict[str, Any] | None:
    """Whether every current chunk carries an embedding from the index's recorded embedder."""
    meta = read(engine.driver, engine.database,
                "MATCH (m:IndexMeta {name: 'chunk_embedding'}) RETURN m.identity AS identity")
    if not meta:
        return None
    identity = meta[0]["identity"]
    missing = read(engine.driver, engine.database,
                   "MATCH (c:Chunk {active: true}) WHERE c.pack IN $packs AND "
                   "(c.embedding IS NULL OR c.embedder IS NULL OR c.embedder <> $identity) RETURN count(c) AS n",
                   packs=sorted(engine.packs), identity=identity)[0]["n"]
    return {"embedder_identity": identity, "complete": missing == 0}


def run_eval(engine: Engine, golden_paths: list[Path], *, generate: bool = False,
             progress=print) -> EvalReport:
    results = []
    for path in golden_paths:
        golden = load_golden(path)
        pack = golden["pack"]
        role_default = golden.get("role") or default_role(engine, pack)
        for q in golden["queries"]:
            started = time.perf_counter()
            outcome = run_query(engine, q["question"], q.get("role", role_default), generate=generate,
                                local_inference=False, run_id="eval")
            latency = (time.perf_counter() - started) * 1000
            anchors = {d.chunk_id: d.anchor for d in outcome.context.documents}
            cost = outcome.answer.cost if generate else Decimal(0)
            results.append(score_query(
                id=q["id"], pack=pack, question=q["question"], gold=q.get("gold") or [],
                expect_insufficient=bool(q.get("insufficient_evidence")),
                ranked=[c.anchor for c in outcome.retrieval.candidates],
                cited=[anchors.get(c, c) for c in outcome.answer.citations],
                answered_insufficient=outcome.answer.insufficient_evidence,
                latency_ms=latency, cost_usd=cost))
        progress(f"[eval] {path}: {len(golden['queries'])} queries")
    gen = engine.registry.generation
    emb = engine.registry.embedding
    return EvalReport.model_validate({
        "schema": "rag-eval-report/1",
        "created_at": datetime.now(timezone.utc),
        "config_hash": config_hash(engine.cfg),
        "golden": {"paths": [str(p.relative_to(engine.root)) if p.is_relative_to(engine.root) else str(p)
                             for p in golden_paths], "hash": golden_sha256(golden_paths)},
        "generation": ({"provider": gen.provider.name, "model": gen.model.served_model} if generate
                       else {"provider": "none", "model": "extractive"}),
        "embedder": {"provider": emb.provider.name, "model": emb.model.served_model,
                     "dimension": emb.model.dimension, "identity": emb.identity},
        "reindex": reindex_info(engine),
        "metrics": aggregate(results),
        "queries": results,
    })


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m evals.runner", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default=DEFAULT_CONFIG)
    ap.add_argument("--output", required=True)
    ap.add_argument("--generate", action="store_true", help="answer with the default generation model")
    args = ap.parse_args(argv)
    engine = Engine.from_path(args.config)
    try:
        paths = [engine.root / p for p in engine.cfg.evals.golden]
        report = run_eval(engine, paths, generate=args.generate)
    except EvalInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        engine.close()
    dump_report(report, Path(args.output))
    m = report.metrics
    print(f"[eval] {m.queries} queries: recall@5 {m.recall_at_5:.3f}, mrr@10 {m.mrr_at_10:.3f}, "
          f"ndcg@10 {m.ndcg_at_10:.3f}, citation hit {m.citation_hit_rate:.3f}, "
          f"insufficient-evidence accuracy {m.insufficient_evidence_accuracy:.3f}, "
          f"p50 {m.latency_ms_p50:.0f} ms, p95 {m.latency_ms_p95:.0f} ms -> {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
