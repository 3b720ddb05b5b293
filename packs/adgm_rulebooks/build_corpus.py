"""Convert the ObliQA-XRef ADGM cross-reference data into this pack's corpus (and check it).

Source (Apache-2.0, see corpus/NOTICE.md): ``CrossReferenceData.csv`` (one gold cross reference
a row: source passage, reference text, type, target passage) and ``documents.tsv`` (instrument
number -> short code and title).

Output, deterministic (running it twice gives byte-identical files):

``corpus/<doc_id>.jsonl``, one file per instrument that has at least one passage in the data.
JSON Lines, UTF-8, one object a line, parsed strictly by the pack:

    {"code": "COBS", "document_id": 3, "passages": 224, "title": "Conduct of Business Rulebook"}
    {"passage_id": "12", "text": "..."}
    {"passage_id": "14.1.3.Guidance.1", "text": "..."}

The first line is the instrument header; every further line is one passage, its own numbering
(``SourcePassageID``/``TargetPassageID``) and its text verbatim. Why JSON Lines and not Markdown:
passage texts carry tabs, blank lines, trailing newlines and lines of their own that a Markdown
heading grammar would have to escape; JSON keeps them byte for byte and a reader cannot confuse
text with structure. Passages are in natural order of their numbering (digit runs compared as
numbers), so a diff reads like the rulebook.

``corpus/gold/xref_links.jsonl``: the 1,627 gold links, one a row in CSV order, without the
passage texts (they are in the documents): ``{"type", "source_doc", "source_passage",
"reference_text", "target_doc", "target_passage"}``; an Outsource link names no target
(``null``): it points outside the ADGM data. ``evals/xref.py`` scores the pack against it. It
sits in a subdirectory so the document glob (``*.jsonl``) never ingests it.

Rules the data needs:

- doc_id = lower-case instrument code. Instruments documents.tsv gives no code get one here
  (``EXTRA_CODES``): ``GN-`` for a guidance note, ``SG-`` for supplementary guidance, ``GP-``
  for guiding principles, then a short mnemonic of the title. Fixed, so ids never move.
- A passage is (instrument, passage id). The CSV repeats a passage in many rows, sometimes with
  a text that lost its non-ASCII characters (curly quotes, dashes, U+200E marks); the longest
  variant of a passage UUID is kept (the others are that text minus characters).
- Three passage ids carry two passage UUIDs with different texts (MKT ``1`` and ``2``, FSMR
  ``Part 12.Chapter 1.134.``: a heading and its body). They are one passage here, the texts
  joined by a newline in order of first appearance in the CSV.
- 38 passages have an empty text in the data (a rule whose paragraphs are separate passages);
  they are kept, empty: they are reference targets.

Usage (from the repository root)::

    python -m packs.adgm_rulebooks.build_corpus [SOURCE_DIR]          # rewrite corpus/
    python -m packs.adgm_rulebooks.build_corpus [SOURCE_DIR] --check  # exit 1 if corpus/ is stale

SOURCE_DIR defaults to ../shared/corpora/adgm-xref relative to the repository root.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import sys
from collections import defaultdict
from pathlib import Path

PACK_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACK_DIR.parents[1]
DEFAULT_SOURCE = Path("..") / "shared" / "corpora" / "adgm-xref"
DEFAULT_OUT = PACK_DIR / "corpus"
GOLD_NAME = Path("gold") / "xref_links.jsonl"

# Codes for the instruments documents.tsv leaves without one (fixed: doc ids must never move).
EXTRA_CODES = {
    18: "GN-VCFM",  # Guidance - Regulatory Framework for Fund Managers of Venture Capital Funds
    19: "GN-VA",  # Guidance - Regulation of Virtual Asset Activities in ADGM
    20: "GN-ENGLAW",  # Guidance - English Law in ADGM
    21: "GN-API",  # Guidance - Application Programming Interfaces (APIs) in ADGM
    24: "GP-VA",  # Guiding Principles for the FSRA's Approach to Virtual Asset Regulation ...
    25: "GN-ESG",  # Environmental, Social and Governance Disclosures Guidance
    26: "GN-REGLAB",  # FinTech Regulatory Laboratory Guidance
    28: "GN-CD",  # Guidance - Continuous Disclosure
    29: "GN-DSO",  # Guidance - Regulation of Digital Security Offerings and Virtual Assets ...
    30: "GN-MINING",  # Guidance - Disclosure Requirements for Mining Reporting Entities
    31: "GN-PETROLEUM",  # Guidance - Disclosure Requirements for Petroleum Reporting Entities
    32: "SG-PCF",  # Supplementary Guidance - Private Credit Funds
    33: "GN-DS",  # Guidance - Regulation of Digital Securities Activities in ADGM
    34: "GN-SC",  # Guidance - Regulation of Spot Commodity Activities in ADGM
    35: "GN-PFP",  # Guidance - Private Financing Platforms and Multilateral Trading Facilities ...
    36: "GN-CLIMATE",  # Guidance - Principles for the Effective Management of Climate-related ...
    37: "SG-ROBO",  # Supplementary Guidance - Authorisation of Digital Investment Management ...
    38: "SG-OTC",  # Supplementary Guidance - Authorised Persons dealing in OTC Leveraged Products ...
    39: "SG-SF",  # Supplementary Guidance - Sustainable Finance Regulatory Framework
    40: "GN-CRS",  # Guidance Notes for the Common Reporting Standard (CRS), United Arab Emirates
}


class SourceError(Exception):
    """The source data is not what this converter understands."""


def natural_key(passage_id: str) -> tuple[tuple[int, int, str], ...]:
    """Digit runs compare as numbers, everything else case-insensitively: 2.9 < 2.10 < 10.1."""
    return (
        *tuple(
            (0, int(tok), "") if tok.isdigit() else (1, 0, tok.lower()) for tok in re.findall(r"\d+|\D+", passage_id)
        ),
        (2, 0, passage_id),
    )


def read_instruments(source: Path) -> dict[int, dict[str, str]]:
    """document_id -> {code, title} from documents.tsv, with codes for the uncoded ones."""
    out: dict[int, dict[str, str]] = {}
    with (source / "documents.tsv").open(encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            number = int(row["document_id"])
            code = row["code"].strip() or EXTRA_CODES.get(number)
            if not code:
                raise SourceError(f"documents.tsv: document {number} has no code and none is defined here")
            out[number] = {"code": code, "title": row["title"].strip()}
    codes = [i["code"].lower() for i in out.values()]
    if len(codes) != len(set(codes)):
        raise SourceError("two instruments share a code")
    return out


def build(source: Path) -> dict[str, str]:
    """{relative output path: file content} for the whole corpus."""
    instruments = read_instruments(source)
    with (source / "CrossReferenceData.csv").open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise SourceError("CrossReferenceData.csv has no rows")

    # passage UUID -> (document number, passage id, longest text); first-seen order of UUIDs
    by_uuid: dict[str, tuple[int, str, str]] = {}
    order: list[str] = []
    for n, row in enumerate(rows, 2):
        for side in ("Source", "Target"):
            doc = row[f"{side}DocumentID"].strip()
            if not doc:
                if side == "Source" or row["ReferenceType"] != "Outsource":
                    raise SourceError(f"CSV line {n}: {side} passage without a document")
                continue
            uuid, pid, text = row[f"{side}ID"], row[f"{side}PassageID"].strip(), row[f"{side}Passage"]
            if int(doc) not in instruments:
                raise SourceError(f"CSV line {n}: unknown document {doc}")
            if not pid:
                raise SourceError(f"CSV line {n}: {side} passage without a passage id")
            if uuid not in by_uuid:
                order.append(uuid)
                by_uuid[uuid] = (int(doc), pid, text)
                continue
            known = by_uuid[uuid]
            if known[:2] != (int(doc), pid):
                raise SourceError(f"CSV line {n}: passage {uuid} changes its number")
            if (len(text), known[2]) > (len(known[2]), text):  # longest, then smallest: order-free
                by_uuid[uuid] = (int(doc), pid, text)

    passages: dict[int, dict[str, list[str]]] = defaultdict(dict)
    for uuid in order:
        doc, pid, text = by_uuid[uuid]
        texts = passages[doc].setdefault(pid, [])
        if text not in texts:
            texts.append(text)

    files: dict[str, str] = {}
    for number in sorted(passages):
        inst = instruments[number]
        doc_id = inst["code"].lower()
        pids = sorted(passages[number], key=natural_key)
        lines = [
            json.dumps(
                {"code": inst["code"], "document_id": number, "passages": len(pids), "title": inst["title"]},
                ensure_ascii=False,
                sort_keys=True,
            )
        ]
        for pid in pids:
            lines.append(json.dumps({"passage_id": pid, "text": "\n".join(passages[number][pid])}, ensure_ascii=False))
        files[f"{doc_id}.jsonl"] = "\n".join(lines) + "\n"

    gold = []
    for row in rows:
        target_doc = row["TargetDocumentID"].strip()
        gold.append(
            json.dumps(
                {
                    "type": row["ReferenceType"],
                    "source_doc": instruments[int(row["SourceDocumentID"])]["code"].lower(),
                    "source_passage": row["SourcePassageID"].strip(),
                    "reference_text": row["ReferenceText"],
                    "target_doc": instruments[int(target_doc)]["code"].lower() if target_doc else None,
                    "target_passage": row["TargetPassageID"].strip() or None,
                },
                ensure_ascii=False,
            )
        )
    files[GOLD_NAME.as_posix()] = "\n".join(gold) + "\n"
    return files


def _notice(source: Path) -> str:
    original = (source / "NOTICE.md").read_text(encoding="utf-8")
    return (
        "# ADGM rulebook passages and gold cross references (ObliQA-XRef)\n\n"
        "This directory is a **converted copy** of `CrossReferenceData.csv` and `documents.tsv` of the\n"
        "ObliQA-XRef project, made by `packs/adgm_rulebooks/build_corpus.py`: one JSON Lines file per\n"
        "instrument (`<code>.jsonl`: a header line, then one line per distinct passage with its own\n"
        "numbering and its text verbatim) and the gold links without the passage texts\n"
        "(`gold/xref_links.jsonl`). Codes of instruments the source gives none (`GN-...`, `SG-...`,\n"
        "`GP-...`) were defined for this project. Nothing else was changed; see the builder's docstring\n"
        "for how repeated passages were merged. The data stays under the Apache License 2.0 (`LICENSE`\n"
        "beside this file). The source's notice follows.\n\n---\n\n" + original
    )


def expected_files(source: Path) -> dict[str, str]:
    files = build(source)
    files["NOTICE.md"] = _notice(source)
    files["LICENSE"] = (source / "LICENSE").read_text(encoding="utf-8")
    return files


def stale(out_dir: Path, files: dict[str, str]) -> list[str]:
    """What differs between out_dir and the expected files (missing, changed, unexpected)."""
    problems = []
    for rel, content in sorted(files.items()):
        path = out_dir / rel
        if not path.is_file():
            problems.append(f"missing {rel}")
        elif path.read_text(encoding="utf-8") != content:
            problems.append(f"changed {rel}")
    present = (
        {p.relative_to(out_dir).as_posix() for p in out_dir.rglob("*") if p.is_file()} if out_dir.is_dir() else set()
    )
    problems += [f"unexpected {rel}" for rel in sorted(present - set(files))]
    return problems


def write(out_dir: Path, files: dict[str, str]) -> None:
    if out_dir.exists():
        shutil.rmtree(out_dir)
    for rel, content in files.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content, encoding="utf-8", newline="\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "source",
        nargs="?",
        default=None,
        help=f"directory holding CrossReferenceData.csv, documents.tsv, NOTICE.md, LICENSE "
        f"(default: {DEFAULT_SOURCE} relative to the repository root)",
    )
    parser.add_argument("--out", default=None, help="output directory (default: this pack's corpus/)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if the output directory is not exactly what a build gives",
    )
    args = parser.parse_args(argv)
    source = Path(args.source) if args.source else REPO_ROOT / DEFAULT_SOURCE
    out_dir = Path(args.out) if args.out else DEFAULT_OUT
    try:
        files = expected_files(source)
    except (OSError, SourceError, KeyError, ValueError) as exc:
        print(f"error: cannot build from {source}: {exc}", file=sys.stderr)
        return 2
    documents = sum(1 for rel in files if rel.endswith(".jsonl") and "/" not in rel)
    passages = sum(
        content.count("\n") - 1 for rel, content in files.items() if rel.endswith(".jsonl") and "/" not in rel
    )
    if args.check:
        problems = stale(out_dir, files)
        if problems:
            print(
                f"corpus is stale ({len(problems)} file(s)): "
                + "; ".join(problems[:10])
                + "\nrebuild with: python -m packs.adgm_rulebooks.build_corpus",
                file=sys.stderr,
            )
            return 1
        print(f"corpus up to date: {documents} documents, {passages} passages")
        return 0
    write(out_dir, files)
    print(f"wrote {documents} documents, {passages} passages and the gold links to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
