"""Reference-resolution eval: does a pack's own reference extraction land on the gold targets?

    python -m evals.xref --output var/eval/xref.json                 # run, print the table, write the report
    python -m evals.xref --output var/eval/xref.json --gate          # ... and compare with the baseline
    python -m evals.xref --output evals/reports/XREF_BASELINE.json   # refresh the baseline (commit it with a reason)

Pure Python, no Neo4j and no model: the pack's ``chunk`` and ``extract_references`` run over its
corpus (discovered and versioned the way the engine does), and keys resolve by the engine's rule
(graph/writer.py, ``_RESOLVE_KEYS``): a CITES key resolves to every active chunk answering to the
same key, the citing chunk itself excluded. Every resolved (source passage, target passage) pair
is scored against the pack's gold links (``<corpus>/gold/xref_links.jsonl``, one
``{type, source_doc, source_passage, reference_text, target_doc, target_passage}`` a line):

- **Internal / External**: precision, recall and F1 over distinct (source, target) pairs. A
  resolved pair takes the gold type when it is a gold pair, else Internal when both passages are
  in one instrument and External otherwise. Every gold pair missed gets one cause (``MISS_CAUSES``)
  and every extra pair one cause (``EXTRA_CAUSES``), with examples in the report.
- **Outsource**: the target is outside the data, so nothing can resolve; scored as *detection*:
  a gold reference counts as found when an ``outside`` reference of the pack overlaps its text
  in the source passage, and an ``outside`` reference is correct when it overlaps a gold one.
- **overall**: Internal and External pairs together (Outsource has no pairs).

``--gate`` reads the committed baseline (``evals/reports/XREF_BASELINE.json``) and exits 1 when
precision or recall of any type (and overall) is lower than the baseline's by more than the
tolerance: ``--tolerance``, else ``evals.max_drop`` from the config. Exit 2: bad input (no such
pack, no gold file, unreadable baseline, a different gold file than the baseline's).

Longer than 500 lines because the gold file's reading, the resolution run, the per-type scores and
the gate against the baseline are one command.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from rag_engine import DEFAULT_CONFIG, yaml_safe
from rag_engine.config import load_config, under_root
from rag_engine.engine import project_root
from rag_engine.errors import RagError
from rag_engine.ingest.documents import discover, load_document
from rag_engine.packs import ChunkRecord, DomainPack, encode_local_id, load_pack

SCHEMA = "rag-xref-report/1"
DEFAULT_PACK = "adgm_rulebooks"
DEFAULT_BASELINE = "evals/reports/XREF_BASELINE.json"
GOLD_PATH = Path("gold") / "xref_links.jsonl"
AUDIT_NAME = "xref_audit.yaml"
"""Optional, in the pack's fixtures directory: a manual verdict on sampled pairs the gold cannot judge."""
PAIR_TYPES = ("Internal", "External")
TYPES = (*PAIR_TYPES, "Outsource")
OUTSIDE_TYPE = "outside"
EXAMPLES = 10
"""Extra (unlisted) pairs reported per type and cause; every missed gold pair is reported."""

MISS_CAUSES = {
    "self_reference": "the gold target is the citing passage itself; the engine never links a chunk to itself",
    "source_not_in_corpus": "the citing passage is not a chunk of the corpus",
    "target_not_in_corpus": "the gold target passage is not a chunk of the corpus",
    "reference_text_not_in_passage": "the gold reference text does not occur in the citing passage",
    "no_reference_extracted": "no extracted reference overlaps the gold reference text",
    "gold_target_not_named": "the gold target's number is not the one its reference text names "
    "(e.g. 'Rule 4.10' linked to 4.1: a gold error)",
    "outside_instrument": "the reference was read as a provision of an instrument outside the data",
    "wrong_instrument": "the right number was scoped to another instrument",
    "key_not_answered": "the reference's key is answered by no chunk",
    "resolved_elsewhere": "the reference resolved, but to other passages (another number or granularity)",
}
EXTRA_CAUSES = {
    "resolved_to_several": "the key is answered by several passages and the gold names one of them",
    "other_target_of_gold_reference": (
        "the citing passage has a gold link from the same reference text to another passage"
    ),
    "not_a_gold_reference": "the citing passage has no gold link from this reference text",
}


class XrefInputError(RagError):
    """Bad input to the xref eval (exit 2)."""


@dataclass
class Resolution:
    chunks: dict[str, ChunkRecord]
    refs: dict[str, list[Any]]  # anchor -> ReferenceRecords
    answering: dict[str, list[str]]  # key -> anchors answering to it
    pairs: dict[tuple[str, str], list[tuple[str, str]]] = field(default_factory=dict)
    """(source anchor, target anchor) -> [(raw, key)] that produced it."""


def resolve(pack: DomainPack, max_bytes: int) -> Resolution:
    """Chunk the corpus, extract references and resolve keys like the engine does."""
    chunks: dict[str, ChunkRecord] = {}
    for ref in discover(pack):
        doc = load_document(pack, ref.partition_key, max_bytes=max_bytes)
        for chunk in pack.chunk(doc):
            chunks[chunk.anchor] = chunk
    answering: dict[str, list[str]] = defaultdict(list)
    for anchor, chunk in chunks.items():
        for key in chunk.keys:
            answering[key].append(anchor)
    res = Resolution(chunks=chunks, refs={}, answering=dict(answering))
    for anchor, chunk in chunks.items():
        records = pack.extract_references(chunk)
        res.refs[anchor] = records
        for r in records:
            for target in res.answering.get(r.normalized, ()):
                if target != anchor:
                    res.pairs.setdefault((anchor, target), []).append((r.raw, r.normalized))
    return res


def load_gold(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise XrefInputError(f"gold links not found: {path}")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise XrefInputError(f"{path.name}:{n}: {exc.msg}") from None
        if row.get("type") not in TYPES:
            raise XrefInputError(f"{path.name}:{n}: unknown type {row.get('type')!r}")
        rows.append(row)
    if not rows:
        raise XrefInputError(f"{path} has no gold links")
    return rows


def anchor(doc: str, passage: str) -> str:
    return f"{doc}#{encode_local_id(passage)}"


def _spans(text: str, needle: str) -> list[tuple[int, int]]:
    """Where ``needle`` occurs in ``text``; a number never matches inside a longer one ('4.1' is
    not in 'Rule 4.10'), so a gold reference text the passage does not hold is reported as such."""
    needle = needle.strip()
    if not needle:
        return []
    head = r"(?<![\d.])" if needle[0].isdigit() else ""
    tail = r"(?![\d]|\.\d)" if needle[-1].isdigit() else ""
    return [(m.start(), m.end()) for m in re.finditer(head + re.escape(needle) + tail, text)]


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _number(key: str) -> str:
    return key.split(":", 1)[1] if ":" in key else key


_APPX_WORD = re.compile(r"\b(?:App(?:endix)?|APP)\s*(\d+)")
_REF_NUMBER = re.compile(r"\bA?\d+(?:\.\d+[A-Z]?)*")
_REF_RANGE = re.compile(r"\b(A?(?:\d+\.)*)(\d+)\s*(?:to|-|\u2013|\u2014)\s*\1(\d+)\b")


def named_numbers(reference_text: str) -> set[str]:
    """Numbers a gold reference text names, lower case, ranges expanded ("17.1 to 17.6", "47-54").
    Pack-agnostic on purpose: it only decides which predictions the gold can judge."""
    text = _APPX_WORD.sub(r" \1 ", reference_text)
    out = {n.lower() for n in _REF_NUMBER.findall(text)}
    for m in _REF_RANGE.finditer(text):
        lo, hi = int(m.group(2)), int(m.group(3))
        if lo < hi <= lo + 100:
            out |= {f"{m.group(1)}{n}".lower() for n in range(lo, hi + 1)}
    return out


def plain_number(key: str) -> str:
    """A key's number without instrument, sub-levels and unit words: fsmr:58(2) -> 58,
    fsmr:part12.chapter3 -> 3, mkt:app7 -> 7."""
    number = re.sub(r"\(.*", "", _number(key))
    return re.sub(r"^(?:part\w+\.)?(?:chapter|part|app|schedule)", "", number)


def _prf(tp_pred: int, n_pred: int, tp_gold: int, n_gold: int) -> dict[str, Any]:
    p = tp_pred / n_pred if n_pred else None
    r = tp_gold / n_gold if n_gold else None
    f1 = (
        2 * p * r / (p + r)
        if p is not None and r is not None and p + r > 0
        else (0.0 if p is not None and r is not None else None)
    )
    return {
        "gold": n_gold,
        "predicted": n_pred,
        "tp": tp_gold,
        "precision": _round(p),
        "recall": _round(r),
        "f1": _round(f1),
    }


def _per_cause(items: list[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """At most ``limit`` examples of each cause, in their sorted order."""
    seen: Counter[str] = Counter()
    out = []
    for item in items:
        seen[item["cause"]] += 1
        if seen[item["cause"]] <= limit:
            out.append(item)
    return out


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def miss_cause(res: Resolution, source: str, target: str, rows: list[dict[str, Any]]) -> str:
    if source == target:
        return "self_reference"
    if source not in res.chunks:
        return "source_not_in_corpus"
    if target not in res.chunks:
        return "target_not_in_corpus"
    chunk = res.chunks[source]
    spans = [s for row in rows for s in _spans(chunk.text, row["reference_text"])]
    if not spans:
        return "reference_text_not_in_passage"
    near = [r for r in res.refs[source] if any(_overlaps((r.start, r.end), s) for s in spans)]
    if not near:
        return "no_reference_extracted"
    target_numbers = {_number(k) for k in res.chunks[target].keys}
    named = set().union(*(named_numbers(row["reference_text"]) for row in rows))
    if not any(plain_number(k) in named for k in res.chunks[target].keys):
        return "gold_target_not_named"
    if any(r.ref_type == OUTSIDE_TYPE for r in near):
        return "outside_instrument"
    if any(_number(r.normalized) in target_numbers for r in near):
        return "wrong_instrument"
    if all(not res.answering.get(r.normalized) for r in near):
        return "key_not_answered"
    return "resolved_elsewhere"


def extra_cause(
    res: Resolution,
    source: str,
    target: str,
    produced: list[tuple[str, str]],
    gold_by_source: dict[str, list[dict[str, Any]]],
    gold_pairs: set[tuple[str, str]],
) -> str:
    keys = {key for _, key in produced}
    if any(
        len(res.answering.get(k, ())) > 1 and any((source, t) in gold_pairs for t in res.answering[k]) for k in keys
    ):
        return "resolved_to_several"
    text = res.chunks[source].text
    gold_spans = [s for row in gold_by_source.get(source, []) for s in _spans(text, row["reference_text"])]
    ref_spans = [(r.start, r.end) for r in res.refs[source] if r.normalized in keys]
    if any(_overlaps(a, b) for a in ref_spans for b in gold_spans):
        return "other_target_of_gold_reference"
    return "not_a_gold_reference"


def evaluate(
    pack: DomainPack,
    gold_rows: list[dict[str, Any]],
    max_bytes: int,
    res: Resolution | None = None,
    examples: int = EXAMPLES,
) -> dict[str, Any]:
    res = res or resolve(pack, max_bytes)
    gold_pairs: dict[tuple[str, str], str] = {}
    rows_by_pair: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    gold_by_source: dict[str, list[dict[str, Any]]] = defaultdict(list)
    outsource: list[dict[str, Any]] = []
    for row in gold_rows:
        src = anchor(row["source_doc"], row["source_passage"])
        gold_by_source[src].append(row)
        if row["type"] == "Outsource":
            outsource.append(row)
            continue
        pair = (src, anchor(row["target_doc"], row["target_passage"]))
        gold_pairs.setdefault(pair, row["type"])
        rows_by_pair[pair].append(row)

    predicted: dict[tuple[str, str], str] = {}
    for pair in res.pairs:
        same = pair[0].split("#", 1)[0] == pair[1].split("#", 1)[0]
        predicted[pair] = gold_pairs.get(pair) or ("Internal" if same else "External")

    named_by_source = {
        src: set().union(*(named_numbers(r["reference_text"]) for r in rows)) for src, rows in gold_by_source.items()
    }

    def judged(pair: tuple[str, str]) -> bool:
        """The gold can judge a pair it lists, or one made by a reference it annotates in that
        passage (same number); other references of the passage are simply not in the gold."""
        return pair in gold_pairs or any(
            plain_number(k) in named_by_source.get(pair[0], ()) for _, k in res.pairs[pair]
        )

    metrics: dict[str, Any] = {}
    misses: dict[str, list[dict[str, Any]]] = {}
    extras: dict[str, list[dict[str, Any]]] = {}
    for t in PAIR_TYPES:
        gold_t = {p for p, ty in gold_pairs.items() if ty == t}
        pred_t = {p for p, ty in predicted.items() if ty == t}
        hit = gold_t & pred_t
        metrics[t] = _prf(len(hit), len(pred_t), len(hit), len(gold_t))
        judged_t = {p for p in pred_t if judged(p)}
        metrics[t]["judged"] = len(judged_t)
        metrics[t]["precision_annotated"] = _round(len(hit) / len(judged_t) if judged_t else None)
        miss_list = []
        for pair in sorted(gold_t - pred_t):
            miss_list.append(
                {
                    "source": pair[0],
                    "target": pair[1],
                    "reference_text": rows_by_pair[pair][0]["reference_text"],
                    "cause": miss_cause(res, pair[0], pair[1], rows_by_pair[pair]),
                    "extracted": sorted({r.normalized for r in res.refs.get(pair[0], [])})[:12],
                }
            )
        misses[t] = miss_list
        extra_list = []
        for pair in sorted(pred_t - gold_t):
            produced = res.pairs[pair]
            extra_list.append(
                {
                    "source": pair[0],
                    "target": pair[1],
                    "raw": produced[0][0],
                    "judged": judged(pair),
                    "keys": sorted({k for _, k in produced}),
                    "cause": extra_cause(res, pair[0], pair[1], produced, gold_by_source, set(gold_pairs)),
                }
            )
        extras[t] = extra_list
        metrics[t]["miss_causes"] = dict(Counter(m["cause"] for m in miss_list).most_common())
        metrics[t]["extra_causes"] = dict(Counter(e["cause"] for e in extra_list).most_common())
    all_gold, all_pred = set(gold_pairs), set(predicted)
    metrics["overall"] = _prf(len(all_gold & all_pred), len(all_pred), len(all_gold & all_pred), len(all_gold))
    judged_all = {p for p in all_pred if judged(p)}
    metrics["overall"]["judged"] = len(judged_all)
    metrics["overall"]["precision_annotated"] = _round(
        len(all_gold & all_pred) / len(judged_all) if judged_all else None
    )

    # Outsource: detection of references to instruments outside the data
    outside_refs = {a: [(r.start, r.end) for r in refs if r.ref_type == OUTSIDE_TYPE] for a, refs in res.refs.items()}
    found_rows, out_misses = 0, []
    gold_spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in outsource:
        src = anchor(row["source_doc"], row["source_passage"])
        text = res.chunks[src].text if src in res.chunks else ""
        spans = _spans(text, row["reference_text"])
        gold_spans[src] += spans
        if any(_overlaps(a, b) for a in outside_refs.get(src, []) for b in spans):
            found_rows += 1
        else:
            out_misses.append(
                {
                    "source": src,
                    "reference_text": row["reference_text"],
                    "cause": "reference_text_not_in_passage" if not spans else "no_reference_extracted",
                }
            )
    n_pred = sum(len(set(v)) for v in outside_refs.values())
    tp_pred = sum(
        1 for a, v in outside_refs.items() for s in set(v) if any(_overlaps(s, g) for g in gold_spans.get(a, []))
    )
    metrics["Outsource"] = _prf(tp_pred, n_pred, found_rows, len(outsource))
    metrics["Outsource"]["scored_as"] = "detection (targets are outside the data)"
    metrics["Outsource"]["miss_causes"] = dict(Counter(m["cause"] for m in out_misses).most_common())
    misses["Outsource"] = out_misses

    n_refs = sum(len(v) for v in res.refs.values())
    return {
        "schema": SCHEMA,
        "pack": pack.name,
        "rules_fingerprint": pack.rules_fingerprint(),
        "corpus": {
            "documents": len({c.doc_id for c in res.chunks.values()}),
            "chunks": len(res.chunks),
            "references": n_refs,
            "keys_cited": len({r.normalized for v in res.refs.values() for r in v}),
            "resolved_pairs": len(res.pairs),
        },
        "gold": {
            "rows": len(gold_rows),
            "pairs": len(gold_pairs),
            "by_type": dict(Counter(gold_pairs.values())),
            "outsource_rows": len(outsource),
        },
        "metrics": metrics,
        "miss_cause_legend": MISS_CAUSES,
        "extra_cause_legend": EXTRA_CAUSES,
        "misses": misses,
        "extras": {t: _per_cause(v, examples) for t, v in extras.items()},
        "misses_total": {t: len(v) for t, v in misses.items()},
        "extras_total": {t: len(v) for t, v in extras.items()},
    }


def gate(report: dict[str, Any], baseline: dict[str, Any], tolerance: float) -> list[str]:
    """What dropped by more than ``tolerance`` against the baseline (empty: pass)."""
    failures = []
    for t in (*TYPES, "overall"):
        for metric in ("precision", "precision_annotated", "recall"):
            base = baseline["metrics"].get(t, {}).get(metric)
            cand = report["metrics"].get(t, {}).get(metric)
            if base is None:
                continue
            if cand is None or cand < base - tolerance:
                failures.append(f"{t} {metric}: {cand} < baseline {base} - {tolerance}")
    return failures


def table(report: dict[str, Any]) -> str:
    lines = [
        f"{'type':<10} {'gold':>5} {'pred':>5} {'tp':>5} {'precision':>9} {'P(annot.)':>9} {'P(est.)':>8} "
        f"{'recall':>7} {'F1':>6}"
    ]

    def fmt(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    for t in (*TYPES, "overall"):
        m = report["metrics"][t]
        lines.append(
            f"{t:<10} {m['gold']:>5} {m['predicted']:>5} {m['tp']:>5} {fmt(m['precision']):>9} "
            f"{fmt(m.get('precision_annotated')):>9} {fmt(m.get('precision_estimate')):>8} "
            f"{fmt(m['recall']):>7} {fmt(m['f1']):>6}"
        )
    for t in TYPES:
        causes = report["metrics"][t].get("miss_causes") or {}
        if causes:
            lines.append(f"{t} misses: " + ", ".join(f"{k} {v}" for k, v in causes.items()))
        causes = report["metrics"][t].get("extra_causes") or {}
        if causes:
            lines.append(f"{t} extras: " + ", ".join(f"{k} {v}" for k, v in causes.items()))
    if report.get("audit"):
        a = report["audit"]
        lines.append(
            "manual audit of pairs the gold cannot judge: "
            + ", ".join(f"{t} {a[t]['correct']}/{a[t]['still_predicted']} correct" for t in PAIR_TYPES if t in a)
        )
    return "\n".join(lines)


def apply_audit(report: dict[str, Any], res: Resolution, audit: dict[str, Any], path: str) -> None:
    """Add the manual audit of unjudged pairs and the precision estimate it implies:
    (tp + unjudged x share of audited pairs found correct) / predicted, per type."""
    pairs = audit.get("pairs") or []
    out: dict[str, Any] = {"path": path, "sampled": len(pairs)}
    for t in PAIR_TYPES:
        mine = [a for a in pairs if a.get("type") == t]
        live = [a for a in mine if (a["source"], a["target"]) in res.pairs]
        correct = sum(1 for a in live if a.get("verdict") == "correct")
        m = report["metrics"][t]
        unjudged = m["predicted"] - m["judged"]
        estimate = (m["tp"] + unjudged * correct / len(live)) / m["predicted"] if live and m["predicted"] else None
        out[t] = {"sampled": len(mine), "still_predicted": len(live), "correct": correct}
        m["precision_estimate"] = _round(estimate)
    report["audit"] = out


def run(config: str | Path = DEFAULT_CONFIG, pack_name: str = DEFAULT_PACK, examples: int = EXAMPLES) -> dict[str, Any]:
    root = project_root()
    cfg_path = under_root(root, config)
    cfg = load_config(cfg_path)
    entry = cfg.pack(pack_name)
    if entry is None:
        raise XrefInputError(f"no pack {pack_name!r} in {cfg_path}")
    pack = load_pack(entry, root)
    gold_path = pack.corpus_dir / GOLD_PATH
    rows = load_gold(gold_path)
    res = resolve(pack, cfg.max_document_bytes)
    report = evaluate(pack, rows, cfg.max_document_bytes, res, examples)
    report["gold"]["path"] = gold_path.relative_to(root).as_posix()
    report["gold"]["sha256"] = hashlib.sha256(gold_path.read_bytes()).hexdigest()
    audit_path = pack.fixtures_dir / AUDIT_NAME
    if audit_path.is_file():
        try:
            audit = yaml_safe.load_file(audit_path) or {}  # repeated keys refused with file:line
        except yaml.YAMLError as exc:
            raise XrefInputError(f"{audit_path}: {exc}") from None
        apply_audit(report, res, audit, audit_path.relative_to(root).as_posix())
    report["created_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m evals.xref", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--config", default=DEFAULT_CONFIG)
    ap.add_argument("--pack", default=DEFAULT_PACK)
    ap.add_argument("--output", required=True, help="where to write the JSON report")
    ap.add_argument("--gate", action="store_true", help="compare with the baseline; exit 1 on a drop")
    ap.add_argument("--baseline", default=None, help=f"baseline report (default: {DEFAULT_BASELINE})")
    ap.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="largest tolerated drop of a precision or recall (default: evals.max_drop)",
    )
    args = ap.parse_args(argv)
    try:
        cfg = load_config(under_root(project_root(), args.config))
        report = run(args.config, args.pack)
    except (RagError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(table(report))
    print(
        f"[xref] {report['corpus']['chunks']} chunks, {report['corpus']['references']} references, "
        f"{report['corpus']['resolved_pairs']} resolved pairs -> {out}"
    )
    if not args.gate:
        return 0
    base_path = Path(args.baseline) if args.baseline else under_root(project_root(), DEFAULT_BASELINE)
    try:
        baseline = json.loads(base_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"error: baseline {base_path}: {exc}", file=sys.stderr)
        return 2
    if baseline.get("schema") != SCHEMA or baseline.get("pack") != report["pack"]:
        print(f"error: {base_path} is not an xref report of pack {report['pack']}", file=sys.stderr)
        return 2
    if baseline.get("gold", {}).get("sha256") != report["gold"]["sha256"]:
        print(f"error: the gold links changed since the baseline {base_path}: not comparable", file=sys.stderr)
        return 2
    tolerance = args.tolerance if args.tolerance is not None else cfg.evals.max_drop
    failures = gate(report, baseline, tolerance)
    if failures:
        print("[xref] gate FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    print(f"[xref] gate passed against {base_path.name} (tolerance {tolerance})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
