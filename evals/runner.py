"""Run the golden query packs through the query path, beside BM25 and each leg alone, and write
an eval report.

    python -m evals.runner [--config config/engine.yaml] --output evals/reports/latest.json [--extractive]
        [--pack P ...] [--legs lexical,dense] [--weights lexical=1,dense=0.5] [--k K]

The configured default generation model answers (and costs money if hosted). The shipped default,
``demo-chat``, replays FIXTURE answers from ``evals/cassettes/demo.jsonl`` (recorded for every
golden question by ``python -m evals.cassettes.build_demo_cassette --answers``), so CI exercises
generation, the citations of generated answers, tokens and cost per query offline. A model call
that fails (a ``ReplayMiss``: the cassette holds no answer for the exact request) is counted in
the report's ``generation.failures`` and printed, and the gate fails on it: the engine's
extractive fallback never passes for the model. ``--extractive`` answers with the top context
chunk instead (retrieval, citation and insufficient-evidence behaviour without any model).
The report records the golden pack hash, the embedder identity, whether the chunk index was
fully built with it, the secret-redacted config hash and the fusion weights the engine ran with.

Systems, per golden pack, on the same active chunks and the same questions (each query's role
decides which collections every system may read):

- ``engine``: the full query path (``run_query``), the report's queries and metrics;
- ``bm25``: ``evals.bm25_baseline`` over the pack's chunks (the floor the gate enforces);
- ``fulltext``: the engine's fulltext leg alone (Neo4j's Lucene index, ``retrieval.lexical_k``);
- ``dense``: the engine's vector leg alone (``retrieval.dense_k``; no hits for a question the
  embedder maps to the zero vector, as in the engine).

Ablations are one flag away: ``--legs lexical,dense`` keeps the listed legs (``exact``,
``lexical``, ``dense``, ``live``) at their configured weight and sets the others to 0; ``--weights
lexical=1,dense=0.5`` sets the listed legs' weights (applied after ``--legs``; unlisted legs keep
theirs). Only the engine changes; the baselines are the same in every run.

The answers' tally is ``evals.answer_tally``; the printed tables are ``evals.run_tables``.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from evals.answer_metrics import fact_fields, split_tables
from evals.answer_tally import AnswerTally
from evals.bm25_baseline import BM25Baseline
from evals.metrics import aggregate, score_query, system_metrics
from evals.report import (
    BASELINE_SYSTEMS,
    SCHEMA,
    SYSTEMS,
    TOP_K,
    VARIANTS,
    EvalReport,
    dump_report,
    golden_sha256,
)
from evals.run_tables import exact_hits_table, split_table, systems_table
from evals.splits import load_splits, split_of
from rag_engine import DEFAULT_CONFIG, yaml_safe
from rag_engine.config import LEGS, config_hash
from rag_engine.engine import Engine
from rag_engine.errors import EvalInputError
from rag_engine.governance.policy import gate
from rag_engine.providers.registry import QUESTION_TIME_PURPOSES
from rag_engine.retrieval.query import run_query
from rag_engine.retrieval.retriever import retrieve
from rag_engine.store import reads
from rag_engine.store.session import read_transaction
from rag_engine.usage import EVAL_ACTOR, acting_as, in_run, tallying


def load_golden(path: Path) -> dict[str, Any]:
    try:
        data = yaml_safe.load_file(path)
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
    """Whether every current chunk carries a vector in the active index (the one ``rag reindex``
    switched to, or the first one), from the index's recorded embedder."""
    from rag_engine.store.schema import index_coverage

    coverage = index_coverage(engine.driver, engine.database, sorted(engine.packs))
    if coverage is None:
        return None
    return {"embedder_identity": coverage["embedder_identity"], "complete": coverage["complete"]}


# ---------------------------------------------------------------------------------------
# Ablation flags


def _parse_legs(text: str) -> list[str]:
    legs = [leg.strip() for leg in text.split(",") if leg.strip()]
    unknown = sorted(set(legs) - set(LEGS))
    if not legs or unknown:
        raise EvalInputError(
            f"--legs {text!r}: name one or more of {list(LEGS)}" + (f" (unknown: {unknown})" if unknown else "")
        )
    return legs


def _parse_weights(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        leg, sep, value = item.partition("=")
        leg = leg.strip()
        try:
            weight = float(value) if sep else None
        except ValueError:
            weight = None
        if leg not in LEGS or weight is None or not weight >= 0 or weight == float("inf"):
            raise EvalInputError(
                f"--weights {text!r}: expected leg=weight pairs with legs in {list(LEGS)} "
                f"and finite weights >= 0, got {item!r}"
            )
        out[leg] = weight
    if not out:
        raise EvalInputError(f"--weights {text!r}: no leg=weight pair")
    return out


def leg_weights(
    configured: dict[str, float], *, legs: str | None = None, weights: str | None = None
) -> dict[str, float] | None:
    """The engine's per-leg weights for an ablation, or None for the configured ones.

    ``legs`` keeps the listed legs at their configured weight and zeroes the rest; ``weights``
    then sets the listed legs. A result with every leg at 0 would retrieve nothing: an input error.
    """
    if legs is None and weights is None:
        return None
    out = {leg: float(configured.get(leg, 1.0)) for leg in LEGS}
    if legs is not None:
        keep = set(_parse_legs(legs))
        out = {leg: (w if leg in keep else 0.0) for leg, w in out.items()}
    if weights is not None:
        out.update(_parse_weights(weights))
    if not any(out.values()):
        raise EvalInputError(f"every retrieval leg has weight 0 ({out}): nothing would be retrieved")
    return out


def _anchors(rows: Sequence[dict[str, Any]]) -> list[str]:
    return [r["anchor"] for r in rows][:TOP_K]


def baseline_rankings(engine: Engine, bm25: BM25Baseline, pack: str, question: str, role: str) -> dict[str, list[str]]:
    """Top-10 anchors of BM25 and of the engine's fulltext and dense legs alone, for one question,
    over the collections the role may read (its query embedding is metered under the run ``in_run``
    names, like every model call of the eval)."""
    collections = gate(engine.cfg, role).collections
    cfg = engine.cfg.retrieval
    vec = engine.embed_texts([question], purpose="query")[0]
    with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
        return {
            "bm25": bm25.search(pack, collections, question, TOP_K),
            "fulltext": _anchors(reads.fulltext(rx, question, collections, cfg.lexical_k)),
            "dense": _anchors(reads.vector(rx, vec, collections, cfg.dense_k, engine.embedder_identity))
            if any(vec)
            else [],
        }


RRF_LEGS = {"exact": 0.0, "lexical": 1.0, "dense": 1.0, "live": 0.0, "graph": 0.0}


def variant_rankings(
    engine: Engine, question: str, role: str, k: int | None, weights: dict[str, float] | None
) -> dict[str, list[str]]:
    """Top-10 anchors of the engine's ablations (``report.VARIANTS``) for one question: the graph
    leg off, and the feature reranker off (retrieval only, same weights otherwise)."""
    base = {**engine.leg_weights, **(weights or {})}
    runs = {
        "engine_no_graph": retrieve(engine, question, role, k=k, weights={**base, "graph": 0.0}),
        "engine_no_rerank": retrieve(engine, question, role, k=k, weights=base, rerank=False),
        "engine_no_sentences": retrieve(engine, question, role, k=k, weights=base, units=False),
        # plain RRF of the two text legs: what the engine's reference, boost and rerank machinery must beat
        "rrf": retrieve(engine, question, role, k=k, weights=RRF_LEGS, rerank=False, units=False),
    }
    return {name: [c.anchor for c in r.candidates][:TOP_K] for name, r in runs.items()}


def select_golden(golden_paths: Sequence[Path], packs: Sequence[str] | None) -> list[Path]:
    """The golden files of the named packs (all when None); an unknown pack is an input error."""
    if not packs:
        return list(golden_paths)
    by_pack = {load_golden(p)["pack"]: p for p in golden_paths}
    unknown = sorted(set(packs) - set(by_pack))
    if unknown:
        raise EvalInputError(f"--pack {unknown}: no golden file for it; golden packs: {sorted(by_pack)}")
    return [p for p in golden_paths if load_golden(p)["pack"] in set(packs)]


def run_eval(
    engine: Engine,
    golden_paths: list[Path],
    *,
    generate: bool = False,
    progress: Callable[[str], None] = print,
    weights: dict[str, float] | None = None,
    k: int | None = None,
    run_id: str | None = None,
) -> EvalReport:
    """Score the engine (with ``weights``/``k`` overrides, if any), BM25 and each leg alone.

    Eval traffic is told apart from users': every query is audited and every model call metered
    under the eval's ``run_id`` (a Dagster run's id, else ``eval-<12 hex>``; the report records it)
    and the actor ``eval`` (``rag_engine.usage.EVAL_ACTOR``), the question's embedding deep in
    retrieval and the baselines' included, so the run's ledger records are all its calls. A query's
    tokens and cost are those of its own answer's model calls (``tallying``), never another query's."""
    run_id = run_id or f"eval-{uuid.uuid4().hex[:12]}"
    with acting_as(EVAL_ACTOR), in_run(run_id):
        # questions embedded in process from the first (with in_process): a loaded machine then
        # cannot make a question's embedding miss its deadline and change a ranking
        engine.prepare_question_embedder()
        return _run_eval(
            engine, golden_paths, generate=generate, progress=progress, weights=weights, k=k, run_id=run_id
        )


def _run_eval(
    engine: Engine,
    golden_paths: list[Path],
    *,
    generate: bool,
    progress: Callable[[str], None],
    weights: dict[str, float] | None,
    k: int | None,
    run_id: str,
) -> EvalReport:
    results = []
    systems: dict[str, dict[str, Any]] = {}
    rankings: dict[str, dict[str, list[str]]] = {}
    bm25 = BM25Baseline(engine.driver, engine.database)
    bm25_stemmed = BM25Baseline(engine.driver, engine.database, stem=True)
    answers = AnswerTally()
    splits = load_splits()
    by_split: dict[str, dict[str, list[tuple[Sequence[str], Sequence[str], bool]]]] = {}
    for path in golden_paths:
        golden = load_golden(path)
        pack = label = golden["pack"]
        if golden.get("set"):  # a second set of the pack (paraphrases) is scored as its own table
            label = f"{pack}/{golden['set']}"
        if label in systems:
            raise EvalInputError(
                f"two golden files for {label!r}; merge them or give one a 'set' name (the systems table is per set)"
            )
        role_default = golden.get("role") or default_role(engine, pack)
        rows: dict[str, list[tuple[Sequence[str], Sequence[str], bool]]] = {s: [] for s in (*SYSTEMS, *VARIANTS)}
        for q in golden["queries"]:
            split = split_of(q["id"], golden.get("set"), splits)
            role = q.get("role", role_default)
            gold, insufficient = q.get("gold") or [], bool(q.get("insufficient_evidence"))
            started = time.perf_counter()
            with tallying() as calls:  # this query's model calls, no other's
                outcome = run_query(
                    engine,
                    q["question"],
                    role,
                    k=k,
                    generate=generate,
                    local_inference=False,
                    run_id=run_id,
                    weights=weights,
                    actor=EVAL_ACTOR,
                )
            latency = (time.perf_counter() - started) * 1000
            started = time.perf_counter()  # the in-run latency control: the fulltext leg alone
            with read_transaction(engine.driver, engine.database, packs=engine.packs) as rx:
                reads.fulltext(rx, q["question"], gate(engine.cfg, role).collections, engine.cfg.retrieval.lexical_k)
            control_ms = (time.perf_counter() - started) * 1000
            # the answer's calls: the question's embedding is shared query-side cost (the run's ledger
            # and tags have it; rag costs --by-model adds it per query), and a timed-out one has no cost
            records = [r for r in calls if r.purpose not in QUESTION_TIME_PURPOSES]
            tokens = sum(r.input_tokens + r.output_tokens for r in records)
            if generate:
                answers.add(q["id"], outcome.answer, [r.reported_model for r in records if r.purpose == "answer"])
            anchors = {d.chunk_id: d.anchor for d in outcome.context.documents}
            # what the query's model calls cost (ledger): 0 without a call, unknown if any call's is
            costs = [r.cost for r in records]
            cost = None if None in costs else sum((c for c in costs if c is not None), Decimal(0))
            scored = score_query(
                id=q["id"],
                pack=label,
                question=q["question"],
                gold=gold,
                expect_insufficient=insufficient,
                ranked=[c.anchor for c in outcome.retrieval.candidates],
                cited=[anchors.get(c, c) for c in outcome.answer.citations],
                answered_insufficient=outcome.answer.insufficient_evidence,
                latency_ms=latency,
                cost_usd=cost,
            )
            scored = scored.model_copy(
                update={
                    "tokens": tokens,
                    "control_latency_ms": control_ms,
                    "answer_method": outcome.answer.method,
                    "answer_error": outcome.answer.error_type,
                    "exact": tuple(c.anchor for c in outcome.retrieval.candidates if c.exact),
                    "refused_found": bool(
                        outcome.answer.insufficient_evidence
                        and not insufficient
                        and set(gold) & {d.anchor for d in outcome.context.documents}
                    ),
                    "split": split,
                    "names_reference": any(
                        s.get("keys") for s in outcome.retrieval.trace if s.get("step") == "exact_references"
                    ),
                    "answer": outcome.answer.text,
                    "tokens_estimated": any(r.estimated for r in records),
                    **fact_fields(q.get("fact"), outcome.answer),
                }
            )
            results.append(scored)
            rankings[q["id"]] = baseline_rankings(engine, bm25, pack, q["question"], role)
            group = "reference" if scored.names_reference else "plain"
            tables = [rows] + [
                by_split.setdefault(key, {s: [] for s in (*SYSTEMS, *VARIANTS)})
                for key in (f"{pack}@{split}", f"{pack}@{split}:{group}")
            ]
            variants = variant_rankings(engine, q["question"], role, k, weights)
            collections = gate(engine.cfg, role).collections
            variants["bm25_stemmed"] = bm25_stemmed.search(pack, collections, q["question"], TOP_K)
            for table in tables:
                table["engine"].append((scored.ranked, gold, insufficient))
                for system in BASELINE_SYSTEMS:
                    table[system].append((rankings[q["id"]][system], gold, insufficient))
                for variant, ranked in variants.items():
                    table[variant].append((ranked, gold, insufficient))
        systems[label] = {s: system_metrics(r) for s, r in rows.items()}
        progress(f"[eval] {path}: {len(golden['queries'])} queries")
    warning = answers.warning()
    if warning:
        progress(warning)
    gen = engine.registry.generation
    emb = engine.registry.embedding
    return EvalReport.model_validate(
        {
            "schema": SCHEMA,
            "created_at": datetime.now(UTC),
            "run_id": run_id,
            "config_hash": config_hash(engine.cfg),
            "golden": {
                "paths": [
                    str(p.relative_to(engine.root)) if p.is_relative_to(engine.root) else str(p) for p in golden_paths
                ],
                "hash": golden_sha256(golden_paths),
            },
            "generation": (
                {"provider": gen.provider.name, "model": gen.model.served_model, **answers.info()}
                if generate
                else {"provider": "none", "model": "extractive"}
            ),
            "embedder": {
                "provider": emb.provider.name,
                "model": emb.model.served_model,
                "dimension": emb.model.dimension,
                "identity": emb.identity,
            },
            "reindex": reindex_info(engine),
            "configured_generation": {"provider": gen.provider.name, "model": gen.model.served_model},
            "metrics": aggregate(results),
            "queries": results,
            "retrieval": {"weights": {**engine.leg_weights, **(weights or {})}, "k": k},
            "systems": systems,
            "rankings": rankings,
            "splits": split_tables(by_split, results),
        }
    )


def build_parser() -> argparse.ArgumentParser:
    """The runner's command line (the model answers unless --extractive)."""
    ap = argparse.ArgumentParser(
        prog="python -m evals.runner", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", default=DEFAULT_CONFIG)
    ap.add_argument("--output", required=True)
    answers = ap.add_mutually_exclusive_group()
    answers.add_argument(
        "--generate",
        dest="extractive",
        action="store_false",
        default=False,
        help="answer with the default generation model (the default)",
    )
    answers.add_argument(
        "--extractive",
        action="store_true",
        help="answer extractively (top chunk, cited): retrieval only, no generation model",
    )
    ap.add_argument(
        "--pack",
        action="append",
        metavar="P",
        help="run only this pack's golden set (repeatable; default: every evals.golden file)",
    )
    ap.add_argument(
        "--legs",
        metavar="L1,L2",
        help=f"engine legs to keep at their configured weight, others 0 (legs: {', '.join(LEGS)})",
    )
    ap.add_argument("--weights", metavar="LEG=W,...", help="engine per-leg fusion weights (after --legs)")
    ap.add_argument("--k", type=int, default=None, help="engine top k (default: retrieval.final_k)")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    engine = Engine.from_path(args.config)
    try:
        if args.k is not None and not 1 <= args.k <= engine.cfg.retrieval.max_k:
            raise EvalInputError(
                f"--k must be between 1 and retrieval.max_k {engine.cfg.retrieval.max_k}, got {args.k}"
            )
        weights = leg_weights(engine.leg_weights, legs=args.legs, weights=args.weights)
        paths = select_golden([engine.root / p for p in engine.cfg.evals.golden], args.pack)
        report = run_eval(engine, paths, generate=not args.extractive, weights=weights, k=args.k)
    except EvalInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        engine.close()
    dump_report(report, Path(args.output))
    m = report.metrics

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f}"

    print(
        f"[eval] {m.queries} queries: recall@5 {f(m.recall_at_5)}, mrr@10 {f(m.mrr_at_10)}, "
        f"ndcg@10 {f(m.ndcg_at_10)}, map@10 {f(m.map_at_10)}, citation hit {f(m.citation_hit_rate)}, "
        f"insufficient-evidence accuracy {f(m.insufficient_evidence_accuracy)}, "
        f"p50 {m.latency_ms_p50:.0f} ms, p95 {m.latency_ms_p95:.0f} ms -> {args.output}"
    )
    gen = report.generation
    if gen.model_answers is not None:
        print(
            f"[eval] answers by {gen.identity()}: {gen.model_answers} by the model, {gen.no_call} decided "
            f"before any model call, {gen.failed} failed" + (f" {dict(gen.failures or {})}" if gen.failed else "")
        )
    assert report.retrieval is not None  # run_eval always records the retrieval run
    print(f"[eval] engine weights {report.retrieval.weights}" + (f", k {args.k}" if args.k else ""))
    print(systems_table(report))
    print(exact_hits_table(report))
    print(split_table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
