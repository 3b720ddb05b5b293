"""`rag` command line: the query path and operator reports, without the orchestrator."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap

from rag_engine.config import config_hash
from rag_engine.engine import DEFAULT_CONFIG, Engine
from rag_engine.errors import RagError


def _engine(args: argparse.Namespace) -> Engine:
    return Engine.from_path(args.config)


def cmd_config_check(args: argparse.Namespace) -> int:
    engine = _engine(args)
    out = {
        "config_hash": config_hash(engine.cfg),
        "generation_model": engine.registry.generation.identity,
        "embedding_model": engine.registry.embedding.identity,
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
    from rag_engine.retrieval.retriever import retrieve

    engine = _engine(args)
    try:
        result = retrieve(engine, args.question, args.role, k=args.k)
    finally:
        engine.close()
    if args.json:
        print(result.model_dump_json(indent=2))
        return 0
    print(f"query: {result.query}\nrole: {result.role} -> collections {list(result.collections)}")
    for ev in result.events:
        print(f"governance: {ev}")
    if not result.candidates:
        print("insufficient evidence: no permitted chunk matched")
        return 0
    for i, c in enumerate(result.candidates, 1):
        via = f" via {c.via}" if c.via else ""
        print(f"\n[{i}] {c.score:.4f} {'/'.join(c.sources)}{via}\n    cite: {c.chunk_id}\n    {c.heading}")
        print(textwrap.indent(textwrap.shorten(c.text, 300), "    "))
    print("\ntrace: " + ", ".join(f"{s['step']} {s['ms']}ms" for s in result.trace))
    return 0


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
    q.set_defaults(fn=cmd_query)

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
