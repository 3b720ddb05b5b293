"""The figure tables docs/retrieval.md quotes, printed as Markdown from a committed eval report.

    python -m evals.doc_tables [--report evals/reports/BASELINE.json]        # print
    python -m evals.doc_tables --write   # replace the block in docs/retrieval.md
    python -m evals.doc_tables --check   # exit 1 when docs/retrieval.md differs (a test runs it)

Two tables: every golden set with each system's nDCG@10 / MAP@10 / Recall@10 (the tuned sets'
questions shaped the code: development figures), and the test split per pack (and per question
group: names a reference or not) with what the user reads (passage at rank 1, the answer states
the fact, found but refused, out of scope answered). The doc holds them between the command line
(``<!-- python -m evals.doc_tables ... -->``) and ``<!-- /evals.doc_tables -->``; never edit the
figures by hand: re-record the report, then ``--write``.
"""

from __future__ import annotations

import argparse
import difflib
import sys
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


ROOT = Path(__file__).resolve().parents[1]
DOC = "docs/retrieval.md"
END = "<!-- /evals.doc_tables -->"


def block(report_path: str) -> str:
    """The generated block, its command line first."""
    report = EvalReport.model_validate_json((ROOT / report_path).read_text(encoding="utf-8"))
    return "\n".join(
        [f"<!-- python -m evals.doc_tables --report {report_path} -->", systems_table(report), "", test_tables(report)]
    )


def in_doc(text: str) -> tuple[int, int] | None:
    """Where the generated block stands in a doc (start, end of the end marker), if it does."""
    start = text.find("<!-- python -m evals.doc_tables")
    end = text.find(END, start)
    return None if start < 0 or end < 0 else (start, end + len(END))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="docs figure tables from a committed eval report")
    parser.add_argument("--report", default="evals/reports/BASELINE.json")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help=f"exit 1 when {DOC} differs from the report")
    mode.add_argument("--write", action="store_true", help=f"replace the block in {DOC}")
    args = parser.parse_args(argv)
    generated = f"{block(args.report)}\n{END}"
    if not (args.check or args.write):
        print(generated)
        return 0
    doc = ROOT / DOC
    text = doc.read_text(encoding="utf-8")
    where = in_doc(text)
    if where is None:
        print(f"{DOC}: no generated block (the command line comment and {END})", file=sys.stderr)
        return 1
    current = text[where[0] : where[1]]
    if args.write:
        doc.write_text(text[: where[0]] + generated + text[where[1] :], encoding="utf-8")
        print(f"{DOC}: tables written from {args.report}")
        return 0
    if current != generated:
        diff = difflib.unified_diff(current.splitlines(), generated.splitlines(), DOC, args.report, lineterm="")
        print("\n".join(diff), file=sys.stderr)
        print(f"{DOC}: its tables differ from {args.report}: python -m evals.doc_tables --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
