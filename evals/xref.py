"""Reference-resolution eval: does a pack's own reference extraction land on the gold targets?

    python -m evals.xref --output var/eval/xref.json                 # run, print the table, write the report
    python -m evals.xref --output var/eval/xref.json --gate          # ... and compare dev with the baseline
    python -m evals.xref --output evals/reports/XREF_BASELINE.json   # refresh the baseline (commit it with a reason)

Pure Python, no Neo4j and no model: the pack's ``chunk`` and ``extract_references`` run over its
corpus (discovered and versioned the way the engine does) and keys resolve by the engine's rule
(``evals.xref_resolve``). Every resolved (source passage, target passage) pair is scored against
the pack's gold links (``<corpus>/gold/xref_links.jsonl``) per link type (``evals.xref_score``).

The gold is split by citing document into dev and test (``evals.xref_gold``, committed in the
pack's ``golden/xref_split.yaml``); the report gives both side by side (``splits``) and the pooled
figures (``metrics``). Reference rules are written against dev only; today's rules predate the
split, so today's test figure is still optimistic (``evals.xref_ablation`` says by how much the
rules written for quirks of the gold move it). Every miss and extra pair carries its split.

``--gate`` reads the committed baseline (``evals/reports/XREF_BASELINE.json``) and exits 1 when
precision or recall of any type (and overall) **on dev** is lower than the baseline's by more than
the tolerance (``--tolerance``, else ``evals.max_drop`` from the config); it prints test's row
beside it and never gates on it. Exit 2: bad input (no such pack, no gold file, no split for a
document of the gold, unreadable baseline, a different gold file or split than the baseline's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from evals.xref_causes import EXTRA_CAUSES, MISS_CAUSES
from evals.xref_gold import GOLD_PATH, PAIR_TYPES, SPLIT_NAME, SPLITS, TYPES, XrefInputError, load_gold, load_split
from evals.xref_resolve import Resolution, doc_of, resolve
from evals.xref_score import EXAMPLES, apply_audit, evaluate
from rag_engine import DEFAULT_CONFIG, yaml_safe
from rag_engine.config import load_config, under_root
from rag_engine.engine import project_root
from rag_engine.errors import RagError
from rag_engine.packs import load_pack

__all__ = ["GOLD_PATH", "XrefInputError", "gate", "resolve", "run", "table"]

SCHEMA = "rag-xref-report/2"
DEFAULT_PACK = "adgm_rulebooks"
DEFAULT_BASELINE = "evals/reports/XREF_BASELINE.json"
AUDIT_NAME = "xref_audit.yaml"
"""Optional, in the pack's fixtures directory: a manual verdict on sampled pairs the gold cannot judge."""
GATED_SPLIT = "dev"


def gate(report: dict[str, Any], baseline: dict[str, Any], tolerance: float) -> list[str]:
    """What dropped on dev by more than ``tolerance`` against the baseline (empty: pass)."""
    failures = []
    base_m = baseline["splits"][GATED_SPLIT]["metrics"]
    cand_m = report["splits"][GATED_SPLIT]["metrics"]
    for t in (*TYPES, "overall"):
        for metric in ("precision", "precision_annotated", "recall"):
            base = base_m.get(t, {}).get(metric)
            cand = cand_m.get(t, {}).get(metric)
            if base is None:
                continue
            if cand is None or cand < base - tolerance:
                failures.append(f"{GATED_SPLIT} {t} {metric}: {cand} < baseline {base} - {tolerance}")
    return failures


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def table(report: dict[str, Any]) -> str:
    """Each type's row on dev and test side by side, then the pooled row, then dev's causes."""
    lines = [
        f"{'split':<6} {'type':<10} {'gold':>5} {'pred':>5} {'tp':>5} {'precision':>9} {'P(annot.)':>9} "
        f"{'P(est.)':>8} {'recall':>7} {'F1':>6}"
    ]
    for t in (*TYPES, "overall"):
        for split, m in [(s, report["splits"][s]["metrics"][t]) for s in SPLITS] + [("all", report["metrics"][t])]:
            lines.append(
                f"{split:<6} {t:<10} {m['gold']:>5} {m['predicted']:>5} {m['tp']:>5} {_fmt(m['precision']):>9} "
                f"{_fmt(m.get('precision_annotated')):>9} {_fmt(m.get('precision_estimate')):>8} "
                f"{_fmt(m['recall']):>7} {_fmt(m['f1']):>6}"
            )
    dev = report["splits"]["dev"]["metrics"]
    for t in TYPES:
        if causes := dev[t].get("miss_causes"):
            lines.append(f"dev {t} misses: " + ", ".join(f"{k} {v}" for k, v in causes.items()))
        if causes := dev[t].get("extra_causes"):
            lines.append(f"dev {t} extras: " + ", ".join(f"{k} {v}" for k, v in causes.items()))
    if report.get("audit"):
        a = report["audit"]
        lines.append(
            "manual audit of pairs the gold cannot judge: "
            + ", ".join(f"{t} {a[t]['correct']}/{a[t]['still_predicted']} correct" for t in PAIR_TYPES if t in a)
        )
    return "\n".join(lines)


def _tag_splits(scored: dict[str, Any], parts: dict[str, set[str]]) -> None:
    """Each miss and extra pair names the split of its citing document."""
    for group in ("misses", "extras"):
        for items in scored[group].values():
            for item in items:
                item["split"] = next(s for s in SPLITS if doc_of(item["source"]) in parts[s])


def _audit(pack_fixtures: Path, root: Path) -> tuple[dict[str, Any], str] | None:
    path = pack_fixtures / AUDIT_NAME
    if not path.is_file():
        return None
    try:
        return yaml_safe.load_file(path) or {}, path.relative_to(root).as_posix()  # repeated keys refused
    except yaml.YAMLError as exc:
        raise XrefInputError(f"{path}: {exc}") from None


def score(
    pack_name: str,
    fingerprint: str,
    res: Resolution,
    rows: list[dict[str, Any]],
    parts: dict[str, set[str]],
    examples: int = EXAMPLES,
) -> dict[str, Any]:
    """The pooled scores and each split's, one resolution run for all of them."""
    pooled = evaluate(res, rows, examples)
    _tag_splits(pooled, parts)
    splits = {}
    for s in SPLITS:
        mine = [r for r in rows if r["source_doc"] in parts[s]]
        scored = evaluate(res.citing_from(parts[s]), mine, examples)
        splits[s] = {"documents": len(parts[s]), "gold": scored["gold"], "metrics": scored["metrics"]}
    n_refs = sum(len(v) for v in res.refs.values())
    return {
        "schema": SCHEMA,
        "pack": pack_name,
        "rules_fingerprint": fingerprint,
        "corpus": {
            "documents": len({c.doc_id for c in res.chunks.values()}),
            "chunks": len(res.chunks),
            "references": n_refs,
            "keys_cited": len({r.normalized for v in res.refs.values() for r in v}),
            "resolved_pairs": len(res.pairs),
        },
        "gold": pooled["gold"],
        "metrics": pooled["metrics"],
        "splits": splits,
        "miss_cause_legend": MISS_CAUSES,
        "extra_cause_legend": EXTRA_CAUSES,
        "misses": pooled["misses"],
        "extras": pooled["extras"],
        "misses_total": pooled["misses_total"],
        "extras_total": pooled["extras_total"],
    }


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
    split_path = pack.fixtures_dir / SPLIT_NAME
    parts = load_split(split_path, [r["source_doc"] for r in rows])
    res = resolve(pack, cfg.max_document_bytes)
    report = score(pack.name, pack.rules_fingerprint(), res, rows, parts, examples)
    report["gold"]["path"] = gold_path.relative_to(root).as_posix()
    report["gold"]["sha256"] = hashlib.sha256(gold_path.read_bytes()).hexdigest()
    report["split"] = {"path": split_path.relative_to(root).as_posix(), **{s: sorted(parts[s]) for s in SPLITS}}
    if found := _audit(pack.fixtures_dir, root):
        audit, path = found
        apply_audit(report, res, audit, path)
        for s in SPLITS:  # each split's estimate from the audited pairs cited from it
            mine = {"pairs": [p for p in audit.get("pairs") or [] if doc_of(p["source"]) in parts[s]]}
            apply_audit(report["splits"][s], res.citing_from(parts[s]), mine, path)
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
    if baseline.get("split") != report["split"]:
        print(f"error: the dev/test split changed since the baseline {base_path}: not comparable", file=sys.stderr)
        return 2
    tolerance = args.tolerance if args.tolerance is not None else cfg.evals.max_drop
    failures = gate(report, baseline, tolerance)
    test, base_test = report["splits"]["test"]["metrics"]["overall"], baseline["splits"]["test"]["metrics"]["overall"]
    print(
        f"[xref] test (reported, not gated): overall recall {test['recall']} (baseline {base_test['recall']}), "
        f"precision (annotated) {test['precision_annotated']} (baseline {base_test['precision_annotated']})"
    )
    if failures:
        print("[xref] gate FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    print(f"[xref] gate passed on {GATED_SPLIT} against {base_path.name} (tolerance {tolerance})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
