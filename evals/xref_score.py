"""The xref eval's scores: precision, recall and F1 per link type over resolved passage pairs, the
cause of every miss and extra pair, and the precision estimate of the manual audit.

- **Internal / External**: precision, recall and F1 over distinct (source, target) pairs. A
  resolved pair takes the gold type when it is a gold pair, else Internal when both passages are
  in one instrument and External otherwise. Every gold pair missed gets one cause (``MISS_CAUSES``)
  and every extra pair one cause (``EXTRA_CAUSES``), with examples in the report.
- **Outsource**: the target is outside the data, so nothing can resolve; scored as *detection*:
  a gold reference counts as found when an ``outside`` reference of the pack overlaps its text
  in the source passage, and an ``outside`` reference is correct when it overlaps a gold one.
- **overall**: Internal and External pairs together (Outsource has no pairs).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from evals.xref_causes import extra_cause, miss_cause, named_numbers, overlaps, plain_number, spans
from evals.xref_gold import PAIR_TYPES
from evals.xref_resolve import OUTSIDE_TYPE, Resolution, anchor

EXAMPLES = 10
"""Extra (unlisted) pairs reported per type and cause; every missed gold pair is reported."""


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


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


def _outsource(res: Resolution, outsource: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Detection of references to instruments outside the data: (metrics, misses)."""
    outside_refs = {a: [(r.start, r.end) for r in refs if r.ref_type == OUTSIDE_TYPE] for a, refs in res.refs.items()}
    found_rows, out_misses = 0, []
    gold_spans: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for row in outsource:
        src = anchor(row["source_doc"], row["source_passage"])
        text = res.chunks[src].text if src in res.chunks else ""
        found = spans(text, row["reference_text"])
        gold_spans[src] += found
        if any(overlaps(a, b) for a in outside_refs.get(src, []) for b in found):
            found_rows += 1
        else:
            out_misses.append(
                {
                    "source": src,
                    "reference_text": row["reference_text"],
                    "cause": "reference_text_not_in_passage" if not found else "no_reference_extracted",
                }
            )
    n_pred = sum(len(set(v)) for v in outside_refs.values())
    tp_pred = sum(
        1 for a, v in outside_refs.items() for s in set(v) if any(overlaps(s, g) for g in gold_spans.get(a, []))
    )
    metrics = _prf(tp_pred, n_pred, found_rows, len(outsource))
    metrics["scored_as"] = "detection (targets are outside the data)"
    metrics["miss_causes"] = dict(Counter(m["cause"] for m in out_misses).most_common())
    return metrics, out_misses


def evaluate(res: Resolution, gold_rows: list[dict[str, Any]], examples: int = EXAMPLES) -> dict[str, Any]:
    """Scores of ``res`` against ``gold_rows``: metrics, misses and extras (see the module docstring)."""
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
        misses[t] = [
            {
                "source": pair[0],
                "target": pair[1],
                "reference_text": rows_by_pair[pair][0]["reference_text"],
                "cause": miss_cause(res, pair[0], pair[1], rows_by_pair[pair]),
                "extracted": sorted({r.normalized for r in res.refs.get(pair[0], [])})[:12],
            }
            for pair in sorted(gold_t - pred_t)
        ]
        extras[t] = [
            {
                "source": pair[0],
                "target": pair[1],
                "raw": res.pairs[pair][0][0],
                "judged": judged(pair),
                "keys": sorted({k for _, k in res.pairs[pair]}),
                "cause": extra_cause(res, pair[0], pair[1], res.pairs[pair], gold_by_source, set(gold_pairs)),
            }
            for pair in sorted(pred_t - gold_t)
        ]
        metrics[t]["miss_causes"] = dict(Counter(m["cause"] for m in misses[t]).most_common())
        metrics[t]["extra_causes"] = dict(Counter(e["cause"] for e in extras[t]).most_common())
    all_gold, all_pred = set(gold_pairs), set(predicted)
    metrics["overall"] = _prf(len(all_gold & all_pred), len(all_pred), len(all_gold & all_pred), len(all_gold))
    judged_all = {p for p in all_pred if judged(p)}
    metrics["overall"]["judged"] = len(judged_all)
    metrics["overall"]["precision_annotated"] = _round(
        len(all_gold & all_pred) / len(judged_all) if judged_all else None
    )
    metrics["Outsource"], misses["Outsource"] = _outsource(res, outsource)
    return {
        "gold": {
            "rows": len(gold_rows),
            "pairs": len(gold_pairs),
            "by_type": dict(Counter(gold_pairs.values())),
            "outsource_rows": len(outsource),
        },
        "metrics": metrics,
        "misses": misses,
        "extras": {t: _per_cause(v, examples) for t, v in extras.items()},
        "misses_total": {t: len(v) for t, v in misses.items()},
        "extras_total": {t: len(v) for t, v in extras.items()},
    }


def apply_audit(scored: dict[str, Any], res: Resolution, audit: dict[str, Any], path: str) -> None:
    """Add the manual audit of unjudged pairs and the precision estimate it implies:
    (tp + unjudged x share of audited pairs found correct) / predicted, per type. Only the audited
    pairs ``res`` still resolves count (a split's resolution holds its own citing documents only)."""
    pairs = audit.get("pairs") or []
    out: dict[str, Any] = {"path": path, "sampled": len(pairs)}
    for t in PAIR_TYPES:
        mine = [a for a in pairs if a.get("type") == t]
        live = [a for a in mine if (a["source"], a["target"]) in res.pairs]
        correct = sum(1 for a in live if a.get("verdict") == "correct")
        m = scored["metrics"][t]
        unjudged = m["predicted"] - m["judged"]
        estimate = (m["tp"] + unjudged * correct / len(live)) / m["predicted"] if live and m["predicted"] else None
        out[t] = {"sampled": len(mine), "still_predicted": len(live), "correct": correct}
        m["precision_estimate"] = _round(estimate)
    scored["audit"] = out
