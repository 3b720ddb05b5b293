"""The figure tables the docs quote, printed as Markdown from the committed eval reports.

    python -m evals.doc_tables [--block retrieval|xref|xref_ablation] [--report R]   # print
    python -m evals.doc_tables --write   # replace every block in its doc
    python -m evals.doc_tables --check   # exit 1 when a doc differs (a test runs it in CI)

Blocks: ``retrieval`` in docs/retrieval.md from evals/reports/BASELINE.json, ``xref`` in
docs/packs.md from evals/reports/XREF_BASELINE.json (the reference-resolution eval per link type,
dev and test), ``xref_ablation`` in docs/packs.md from evals/reports/XREF_ABLATION.json (what each
rule written for a quirk of the gold buys on dev and test).

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
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evals import xref_ablation
from evals.report import EvalReport

SYSTEMS = ("engine", "engine_no_sentences", "rrf", "fulltext", "dense", "bm25", "bm25_stemmed")
HEADS = (
    "engine",
    "without sentence evidence",
    "plain RRF of the legs",
    "fulltext leg",
    "dense leg",
    "BM25 (bm25s, the floor)",
    "BM25 stemmed",
)


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


def xref_table(report: dict[str, Any]) -> str:
    """The reference-resolution eval per link type (an ``evals.xref`` report): dev, test and all."""
    lines = [
        "| type | split | gold pairs | resolved | precision | precision (annotated) | precision (audit est.) "
        "| recall | F1 |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    splits = report.get("splits", {})
    for kind, label in (("Internal", "Internal"), ("External", "External"), ("Outsource", "Outsource (detection)")):
        for split, m in [(s, splits[s]["metrics"].get(kind)) for s in ("dev", "test") if s in splits] + [
            ("all", report["metrics"].get(kind))
        ]:
            if not m:
                continue
            cells = (
                f"{m['gold']:,}",
                f"{m['predicted']:,}",
                _f(m["precision"]),
                _f(m.get("precision_annotated")),
                _f(m.get("precision_estimate")),
                _f(m["recall"]),
                _f(m["f1"]),
            )
            lines.append(f"| {label} | {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Block:
    """One generated block: where it stands (``doc``, between ``first`` and ``end``), the
    committed report it is printed from and how."""

    name: str
    doc: str
    report: str
    render: Callable[[str], str]

    @property
    def first(self) -> str:
        flag = "" if self.name == "retrieval" else f" --block {self.name}"
        return f"<!-- python -m evals.doc_tables{flag} --report {self.report} -->"

    @property
    def end(self) -> str:
        return "<!-- /evals.doc_tables -->" if self.name == "retrieval" else f"<!-- /evals.doc_tables {self.name} -->"

    def generated(self) -> str:
        return f"{self.first}\n{self.render(self.report)}\n{self.end}"

    def in_doc(self, text: str) -> tuple[int, int] | None:
        """Where the block stands in a doc (start, end of the end marker), if it does."""
        start = text.find(self.first.split(" --report ")[0] + " --report ")
        end = text.find(self.end, start)
        return None if start < 0 or end < 0 else (start, end + len(self.end))


def _retrieval(report_path: str) -> str:
    report = EvalReport.model_validate_json((ROOT / report_path).read_text(encoding="utf-8"))
    return "\n".join([systems_table(report), "", test_tables(report)])


def _xref(report_path: str) -> str:
    return xref_table(json.loads((ROOT / report_path).read_text(encoding="utf-8")))


def _xref_ablation(report_path: str) -> str:
    return xref_ablation.table(json.loads((ROOT / report_path).read_text(encoding="utf-8")))


BLOCKS = (
    Block("retrieval", "docs/retrieval.md", "evals/reports/BASELINE.json", _retrieval),
    Block("xref", "docs/packs.md", "evals/reports/XREF_BASELINE.json", _xref),
    Block("xref_ablation", "docs/packs.md", "evals/reports/XREF_ABLATION.json", _xref_ablation),
)
DOC = BLOCKS[0].doc
END = BLOCKS[0].end


def in_doc(text: str) -> tuple[int, int] | None:
    """Where the retrieval block stands in docs/retrieval.md, if it does."""
    return BLOCKS[0].in_doc(text)


def _one(block: Block, *, write: bool) -> int:
    """Check (or write) one block: 0 when the doc holds what the report prints."""
    doc = ROOT / block.doc
    text = doc.read_text(encoding="utf-8")
    where = block.in_doc(text)
    if where is None:
        print(
            f"{block.doc}: no generated block ({block.first.split(' --report ')[0]} ... {block.end})", file=sys.stderr
        )
        return 1
    generated = block.generated()
    if write:
        doc.write_text(text[: where[0]] + generated + text[where[1] :], encoding="utf-8")
        print(f"{block.doc}: tables written from {block.report}")
        return 0
    current = text[where[0] : where[1]]
    if current != generated:
        diff = difflib.unified_diff(current.splitlines(), generated.splitlines(), block.doc, block.report, lineterm="")
        print("\n".join(diff), file=sys.stderr)
        print(
            f"{block.doc}: its tables differ from {block.report}: python -m evals.doc_tables --write", file=sys.stderr
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="docs figure tables from the committed eval reports")
    parser.add_argument("--block", choices=[b.name for b in BLOCKS], help="one block (default: every block)")
    parser.add_argument("--report", help="print from another report of the block's kind")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 when a doc differs from its committed report")
    mode.add_argument("--write", action="store_true", help="replace each block in its doc")
    args = parser.parse_args(argv)
    blocks = [b for b in BLOCKS if args.block in (None, b.name)]
    if not (args.check or args.write):
        for b in blocks:
            print(b.render(args.report or b.report))
        return 0
    if args.report:
        parser.error("--report prints only: --check and --write use the committed reports")
    return max(_one(b, write=args.write) for b in blocks)


if __name__ == "__main__":
    raise SystemExit(main())
