"""The figure tables docs/retrieval.md quotes, printed as Markdown from a committed eval report.

    python -m evals.doc_tables [--report evals/reports/BASELINE.json]

Two tables: every golden set with each system's nDCG@10 / MAP@10 / Recall@10 (the tuned sets'
questions shaped the code: development figures), and the test split per pack (and per question
group: names a reference or not) with what the user reads (passage at rank 1, the answer states
the fact, found but refused, out of scope answered). Paste the output; never edit the figures.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from evals.report import EvalReport

SYSTEMS = ("engine", "engine_no_sentences", "rrf", "fulltext", "dense", "bm25")
HEADS = ("engine", "without sentence evidence", "plain RRF of the legs", "fulltext leg", "dense leg", "BM25 (bm25s)")


def _f(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _cell(m: dict[str, Any] | None) -> str:
    return "-" if not m else f"{_f(m['ndcg@10'])} / {_f(m['map@10'])} / {_f(m['recall@10'])}"


def _head(first: str, columns: tuple[str, ...]) -> list[str]:
    return [f"| {first} | " + " | ".join(columns) + " |", "| " + " | ".join(["---"] * (len(columns) + 1)) + " |"]


def systems_table(report: EvalReport) -> str:
    lines = _head("set (answerable)", HEADS)
    for label, pack in (report.systems or {}).items():
        row = [pack.model_dump(by_alias=True).get(s) for s in SYSTEMS]
        lines.append(f"| {label} ({pack.engine.queries}) | " + " | ".join(_cell(m) for m in row) + " |")
    return "\n".join(lines)


def test_tables(report: EvalReport) -> str:
    tests = {k: v for k, v in (report.splits or {}).items() if k.split("@", 1)[1].startswith("test")}
    lines = _head("pack, test split", HEADS)
    for key, table in tests.items():
        if table["systems"].get("engine", {}).get("queries"):
            lines.append(f"| {key} | " + " | ".join(_cell(table["systems"].get(s)) for s in SYSTEMS) + " |")
    lines += [
        "",
        *_head(
            "pack, test split",
            ("answerable", "passage at rank 1", "answer states the fact", "found but refused", "out of scope answered"),
        ),
    ]
    for key, table in tests.items():
        a = table["answers"]
        facts = f"{_f(a['fact_stated'])} (of {a['fact_questions']})" if a["fact_questions"] else "-"
        scope = f"{_f(a['out_of_scope_answered'])} (of {a['no_answer_questions']})" if a["no_answer_questions"] else "-"
        lines.append(
            f"| {key} | {a['answerable']} | {_f(a['rank1'])} | {facts} | {_f(a['found_but_refused'])} | {scope} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="docs figure tables from a committed eval report")
    parser.add_argument("--report", default="evals/reports/BASELINE.json")
    args = parser.parse_args(argv)
    report = EvalReport.model_validate_json(Path(args.report).read_text())
    print(f"<!-- python -m evals.doc_tables --report {args.report} -->")
    print(systems_table(report))
    print()
    print(test_tables(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
