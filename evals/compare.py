"""Compare eval reports (``python -m evals.runner`` outputs) per set and per question group.

    python -m evals.compare NAME=REPORT.json [NAME=REPORT.json ...] [--metric map@10] [--split train,dev] [--config ...]

``--split`` keeps the questions of those committed splits (``evals.splits``): choose a mechanism
on train and dev, report it on test.

Question groups, read off each question with the packs' own parsers (no store): ``rule`` (it
names a rule or article number: ``query_references``), ``instrument`` (it names a document as a
whole: ``documents_named``), ``neither``. A mechanism that helps one group and costs another
(exact-reference hits, document boosts, the graph leg) shows it here, measured on and off.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from evals.report import load_report
from rag_engine import DEFAULT_CONFIG
from rag_engine.engine import Engine
from rag_engine.retrieval.retriever import question_references


def question_group(engine: Engine, pack: str, question: str) -> str:
    packs = [engine.pack(pack)]
    keys, _ = question_references(engine, question, packs)
    if keys:
        return "rule"
    if packs[0].documents_named(question):
        return "instrument"
    return "neither"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="eval reports side by side, per set and question group")
    parser.add_argument("reports", nargs="+", help="NAME=PATH of a report")
    parser.add_argument("--metric", default="map@10")
    parser.add_argument("--split", default=None, help="comma-separated splits to keep (train, dev, test)")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    args = parser.parse_args(argv)
    engine = Engine.from_path(args.config)
    named = [r.split("=", 1) for r in args.reports]
    reports = {name: load_report(path) for name, path in named}
    keep = set(args.split.split(",")) if args.split else None
    cells: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for name, report in reports.items():
        for q in report.queries:
            if keep is not None and q.split not in keep:
                continue
            value = q.value(args.metric)
            if value is None:
                continue
            group = question_group(engine, q.pack.split("/", 1)[0], q.question)
            for key in ((q.pack, group), (q.pack, "all"), ("all", group), ("all", "all")):
                cells[key][name].append(value)
    names = list(reports)
    print(f"{args.metric}: {'set':<28} {'group':<10} {'n':>4} " + " ".join(f"{n:>10}" for n in names))
    for (pack, group), values in sorted(cells.items()):
        n = len(values[names[0]])
        row = " ".join(f"{sum(v) / len(v):>10.3f}" if v else f"{'-':>10}" for v in (values[k] for k in names))
        print(f"{'':<{len(args.metric) + 2}}{pack:<28} {group:<10} {n:>4} {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
