"""`rag` command line: the query path and operator reports, without the orchestrator."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
import time

from rag_engine.config import config_hash
from rag_engine.engine import DEFAULT_CONFIG, Engine
from rag_engine.errors import RagError


def _engine(args: argparse.Namespace) -> Engine:
    return Engine.from_path(args.config)


def _active_embedder(engine: Engine) -> dict:
    """Which embedder answers, and where (endpoint after any endpoint_env override, redacted)."""
    from rag_engine.config import _redact
    from rag_engine.providers.registry import resolve_endpoint

    spec = engine.registry.embedding
    endpoint = resolve_endpoint(spec.provider, engine.env) if spec.provider.kind != "local_hash" else None
    return {"model": spec.name, "provider": spec.provider.name, "kind": spec.provider.kind,
            "endpoint": _redact(endpoint) if endpoint else "built-in (no server)",
            "input_modes": spec.model.input_modes.model_dump() if spec.model.input_modes else None,
            "embedding_cache": engine.cfg.storage.embedding_cache if spec.provider.kind != "local_hash" else None}


def cmd_config_check(args: argparse.Namespace) -> int:
    engine = _engine(args)
    out = {
        "config_hash": config_hash(engine.cfg),
        "generation_model": engine.registry.generation.identity,
        "embedding_model": engine.registry.embedding.identity,
        "active_embedder": _active_embedder(engine),
        "credentials": engine.registry.credential_status(),
        "neo4j": repr(engine.neo4j_target),
    }
    print(json.dumps(out, indent=2))
    return 0


def cmd_packs_smoke(args: argparse.Namespace) -> int:
    from rag_engine.pack_report import pack_summary

    summary = pack_summary(_engine(args))
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"pack_count: {summary['pack_count']}")
    print(f"domains: {', '.join(f'{k}={v}' for k, v in summary['domains'].items())}")
    print(f"versions: {', '.join(f'{k}={v}' for k, v in summary['versions'].items())}")
    print(f"documents: {', '.join(f'{k}={v}' for k, v in summary['documents'].items())}")
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    from rag_engine.graph.feedback import encode_path_id
    from rag_engine.query import run_query

    engine = _engine(args)
    try:
        outcome = run_query(engine, args.question, args.role, k=args.k, generate=not args.no_generate)
    finally:
        engine.close()
    if args.json:
        print(outcome.model_dump_json(indent=2))
        return 0
    result = outcome.retrieval
    print(f"query: {result.query}\nrole: {result.role} -> collections {list(result.collections)}")
    plan = result.plan or {}
    seeds = ", ".join(s["name"] for s in plan.get("seeds", []))
    print(f"plan: {plan.get('reason', 'n/a')}" + (f" (seeds: {seeds})" if seeds else "")
          + (f" - {plan['detail']}" if plan.get("detail") else ""))
    for ev in outcome.events:
        print(f"event: {ev}")
    for i, c in enumerate(result.candidates, 1):
        via = f" via {c.via}" if c.via else ""
        print(f"\n[{i}] {c.score:.4f} {'/'.join(c.sources)}{via}\n    cite: {c.chunk_id}\n    {c.heading}")
        if c.path:
            hops = " ; ".join(f"{h['seed'] if j == 0 else ''}-[{h['type']} {h['confidence']:.2f}]-{h['to_name']}"
                              for j, h in enumerate(c.path))
            print(f"    path (score {c.path_score:.3f}): {hops}\n    feedback path id: {encode_path_id(c.path)}")
        print(textwrap.indent(textwrap.shorten(c.text, 300), "    "))
    for c in result.expansions:
        print(f"\n[+] expansion {c.score:.4f} via {c.via}\n    cite: {c.chunk_id}\n    {c.heading}")
    ans = outcome.answer
    print("\nanswer" + (f" ({ans.method})" if ans.method else "") + ":")
    if ans.insufficient_evidence:
        print(f"  insufficient evidence ({ans.reason})")
    else:
        print(textwrap.indent(textwrap.shorten(ans.text, 600), "  "))
        print("  citations: " + ", ".join(ans.citations))
    if outcome.context.overflow:
        print(f"context overflow: {len(outcome.context.overflow)} item(s) over budget")
    print("\ntrace: " + ", ".join(f"{s['step']} {s['ms']}ms" for s in result.trace)
          + f"; total {outcome.latency_ms}ms")
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    """The pipeline without the orchestrator (same steps as the Dagster assets)."""
    from rag_engine.ingest import ingest_pack

    engine = _engine(args)
    try:
        packs = [engine.pack(args.pack)] if args.pack else list(engine.packs.values())
        failed = 0
        for pack in packs:
            started = time.perf_counter()
            reports = ingest_pack(engine, pack, extract=not args.no_extract,
                                  progress=lambda m, p=pack.name: print(f"[{p}] {m}", file=sys.stderr))
            # a document is rejected at the step that refused it (source validation, chunking, ...)
            rejected = {key: (step, reason) for step, report in reports.items() for key, reason in report.rejected.items()}
            failed += len(rejected)
            for key, (step, reason) in rejected.items():
                print(f"[{pack.name}] rejected at {step} {key}: {reason}", file=sys.stderr)
            for step, report in reports.items():
                failed += len(report.failed)
                for key, reason in report.failed.items():
                    print(f"[{pack.name}] {step} failed for {key}: {reason}", file=sys.stderr)
            graph = reports["graph_writes"]
            print(f"{pack.name}: {len(reports['chunks'].done)} documents, {reports['chunks'].total('chunks')} chunks, "
                  f"{graph.total('resolved')} references resolved / {graph.total('unresolved')} unresolved, "
                  f"{graph.total('relationships')} inferred edges, {time.perf_counter() - started:.1f}s")
        return 1 if failed else 0
    finally:
        engine.close()


def cmd_quality(args: argparse.Namespace) -> int:
    from rag_engine.graph.quality import quality_report

    engine = _engine(args)
    try:
        report = quality_report(engine.driver, engine.database, list(engine.packs))
    finally:
        engine.close()
    print(json.dumps(report, indent=2, default=str))
    return 0


def cmd_cleanup(args: argparse.Namespace) -> int:
    from rag_engine.graph.cleanup import Approval, plan_cleanup, run_cleanup

    engine = _engine(args)
    packs = list(engine.packs)
    try:
        if args.dry_run:
            print(json.dumps({"would_remove": plan_cleanup(engine.driver, engine.database, packs)}, indent=2))
            return 0
        approval = Approval(approved_by=args.approved_by, reason=args.reason) \
            if args.approved_by and args.reason else None
        out = run_cleanup(engine.driver, engine.database, packs, approval, run_id=f"cli-{int(time.time())}")
        print(json.dumps(out, indent=2))
        return 0
    finally:
        engine.close()


def cmd_feedback(args: argparse.Namespace) -> int:
    from rag_engine.graph.feedback import decode_path_id, record_feedback
    from rag_engine.retrieval.policy import gate

    engine = _engine(args)
    try:
        # as the role: a path it may not read is as unknown as a path that does not exist
        decision = gate(engine.cfg, args.role)
        obs = record_feedback(engine.driver, engine.database, path=decode_path_id(args.path_id),
                              verdict=args.verdict, note=args.note, actor=args.actor, query=args.query or "",
                              collections=decision.collections)
        print(obs.model_dump_json(indent=2))
        return 0
    finally:
        engine.close()


def cmd_costs(args: argparse.Namespace) -> int:
    from rag_engine.providers.costs_cli import costs_report

    engine = _engine(args)
    print(costs_report(engine.cfg, engine.root, run_id=args.run_id, as_json=args.json))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rag", description=__doc__)
    p.add_argument("--config", default=DEFAULT_CONFIG, help="engine config (default: %(default)s)")
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("config", help="configuration")
    csub = c.add_subparsers(dest="action", required=True)
    csub.add_parser("check", help="validate config + registry; print hash and credential presence").set_defaults(fn=cmd_config_check)

    pk = sub.add_parser("packs", help="domain packs")
    pksub = pk.add_subparsers(dest="action", required=True)
    smoke = pksub.add_parser("smoke", help="load every enabled pack and summarize")
    smoke.add_argument("--json", action="store_true")
    smoke.set_defaults(fn=cmd_packs_smoke)

    q = sub.add_parser("query", help="retrieve ranked, cited chunks for a question")
    q.add_argument("question")
    q.add_argument("--role", required=True)
    q.add_argument("-k", type=int, default=None)
    q.add_argument("--json", action="store_true")
    q.add_argument("--no-generate", action="store_true", help="extractive answer, no generation model call")
    q.set_defaults(fn=cmd_query)

    ing = sub.add_parser("ingest", help="ingest the enabled packs (or one) into Neo4j without Dagster")
    ing.add_argument("--pack", default=None)
    ing.add_argument("--no-extract", action="store_true", help="skip LLM graph extraction")
    ing.set_defaults(fn=cmd_ingest)

    sub.add_parser("quality", help="graph quality report (read-only)").set_defaults(fn=cmd_quality)

    cl = sub.add_parser("cleanup", help="remove stale graph paths (requires --approved-by and --reason)")
    cl.add_argument("--approved-by", default="")
    cl.add_argument("--reason", default="")
    cl.add_argument("--dry-run", action="store_true", help="count what would be removed")
    cl.set_defaults(fn=cmd_cleanup)

    fb = sub.add_parser("feedback", help="record diagnostic feedback on a graph path (never changes facts)")
    fb.add_argument("--path-id", required=True)
    fb.add_argument("--role", required=True, help="the caller's role: only paths it may read can be judged")
    fb.add_argument("--verdict", choices=["useful", "harmful"], required=True)
    fb.add_argument("--note", default="")
    fb.add_argument("--actor", required=True)
    fb.add_argument("--query", default=None)
    fb.set_defaults(fn=cmd_feedback)

    co = sub.add_parser("costs", help="usage and cost summary from the ledger")
    co.add_argument("--run-id", default=None)
    co.add_argument("--json", action="store_true")
    co.set_defaults(fn=cmd_costs)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except RagError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
