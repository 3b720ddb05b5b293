"""Fit the feature reranker's weights (``rag_engine/retrieval/rerank.py``) under the held-out rule.

    python -m evals.fit_rerank [--config config/engine.yaml] [--output config/rerank.json]

On an ingested store: every answerable TRAIN and DEV question of the configured golden sets
(``evals.splits``: the committed split; test questions are never read here) is retrieved with the
reranker off and the features of its fused top ``retrieval.rerank.top_n`` recorded. The weights
are fitted on train by a pairwise logistic loss (each gold passage against each non-gold one of
the same question; each question weighs the same whatever its number of pairs; L2 penalty), the
penalty chosen among ``L2_GRID`` by MAP@10 on dev, and MAP@10 / nDCG@10 of the fused and the
reranked order printed for train and dev: development figures. The eval (``python -m
evals.runner``) shows the engine with and without the reranker on the test split: the result.

The weights and how they were fitted are written to ``--output`` (commit it with the figures).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evals.metrics import average_precision_at_k, ndcg_at_k
from evals.runner import default_role, load_golden
from evals.splits import load_splits, split_of
from rag_engine import DEFAULT_CONFIG
from rag_engine.engine import Engine
from rag_engine.errors import EvalInputError
from rag_engine.retrieval.rerank import FEATURES, RerankModel
from rag_engine.retrieval.retriever import retrieve

TOP_K = 10


L2_GRID = (0.001, 0.01, 0.1)


class Example:
    def __init__(self, qid: str, label: str, anchors: list[str], x: np.ndarray, gold: list[str], split: str) -> None:
        self.qid, self.label, self.anchors, self.x, self.gold, self.split = qid, label, anchors, x, gold, split


def collect(engine: Engine, golden_paths: Sequence[Path], keep: Sequence[str] = ("train", "dev")) -> list[Example]:
    """The examples of the answerable questions whose committed split is in ``keep``."""
    splits = load_splits()
    out = []
    top_n = min(engine.cfg.retrieval.rerank.top_n, engine.cfg.retrieval.max_k)
    for path in golden_paths:
        golden = load_golden(path)
        pack = golden["pack"]
        label = f"{pack}/{golden['set']}" if golden.get("set") else pack
        role_default = golden.get("role") or default_role(engine, pack)
        for q in golden["queries"]:
            if q.get("insufficient_evidence") or not q.get("gold"):
                continue
            split = split_of(q["id"], golden.get("set"), splits)
            if split not in keep:
                continue
            result = retrieve(
                engine, q["question"], q.get("role", role_default), k=top_n, rerank=False, with_features=True
            )
            cands = [c for c in result.candidates if c.features is not None]
            x = np.array([[c.features.get(f, 0.0) for f in FEATURES] for c in cands if c.features is not None])
            out.append(
                Example(
                    q["id"], label, [c.anchor for c in cands], x.reshape(len(cands), len(FEATURES)), q["gold"], split
                )
            )
    return out


def fit(examples: Sequence[Example], l2: float, steps: int = 3000, lr: float = 0.5) -> np.ndarray:
    """Pairwise logistic regression (gold over non-gold, per question), full-batch gradient descent."""
    diffs, weights = [], []
    for ex in examples:
        gold = [i for i, a in enumerate(ex.anchors) if a in ex.gold]
        other = [i for i, a in enumerate(ex.anchors) if a not in ex.gold]
        pairs = [ex.x[g] - ex.x[o] for g in gold for o in other]
        if pairs:
            diffs.extend(pairs)
            weights.extend([1.0 / len(pairs)] * len(pairs))
    if not diffs:
        raise EvalInputError("no question has both a gold and a non-gold passage in its top N: nothing to fit")
    d = np.array(diffs)
    sw = np.array(weights) / sum(weights)
    w = np.zeros(d.shape[1])
    w[FEATURES.index("fused_rank")] = 1.0  # start from the fused order
    for _ in range(steps):
        margin = d @ w
        grad = -(d * (sw * (1.0 / (1.0 + np.exp(margin))))[:, None]).sum(axis=0) + l2 * w
        w -= lr * grad
    return w


def judge(examples: Sequence[Example], w: np.ndarray | None) -> dict[str, float]:
    """MAP@10 and nDCG@10 of the fused order (``w`` None) or the reranked one."""
    maps, ndcgs = [], []
    for ex in examples:
        order = ex.anchors if w is None else [ex.anchors[i] for i in np.argsort(-(ex.x @ w), kind="stable")]
        maps.append(average_precision_at_k(order, ex.gold, TOP_K))
        ndcgs.append(ndcg_at_k(order, ex.gold, TOP_K))
    return {"map@10": round(float(np.mean(maps)), 4), "ndcg@10": round(float(np.mean(ndcgs)), 4), "n": len(examples)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="fit the feature reranker on train, choose its L2 on dev")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    parser.add_argument("--output", default="config/rerank.json")
    args = parser.parse_args(argv)
    engine = Engine.from_path(args.config)
    try:
        examples = collect(engine, [engine.root / p for p in engine.cfg.evals.golden])
    finally:
        engine.close()
    fit_set = [e for e in examples if e.split == "train"]
    judge_set = [e for e in examples if e.split == "dev"]
    fitted = {l2: fit(fit_set, l2) for l2 in L2_GRID}
    l2 = max(L2_GRID, key=lambda v: (judge(judge_set, fitted[v])["map@10"], -v))
    w = fitted[l2]
    report: dict[str, Any] = {"l2_on_dev": {str(v): judge(judge_set, fitted[v])["map@10"] for v in L2_GRID}}
    for name, subset in (("train", fit_set), ("dev", judge_set)):
        report[name] = {"fused": judge(subset, None), "reranked": judge(subset, w)}
        for label in sorted({e.label for e in subset}):
            part = [e for e in subset if e.label == label]
            report[name][label] = {"fused": judge(part, None), "reranked": judge(part, w)}
    weights = tuple(round(float(v), 5) for v in w)
    version = hashlib.sha256(json.dumps([FEATURES, weights]).encode()).hexdigest()[:12]
    model = RerankModel(
        version=version,
        features=FEATURES,
        weights=weights,
        fitted_on={
            "script": "python -m evals.fit_rerank",
            "split": "evals/splits.yaml: fitted on train, L2 chosen on dev; test never read",
            "l2": l2,
            "top_n": engine.cfg.retrieval.rerank.top_n,
            "embedder": engine.embedder_identity,
            "questions": {"train": len(fit_set), "dev": len(judge_set)},
            "map@10": {
                name: {k: v for k, v in r.items() if k in ("fused", "reranked")}
                for name, r in report.items()
                if name in ("train", "dev")
            },
        },
    )
    Path(args.output).write_text(json.dumps(model.model_dump(), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(report, indent=1))
    print("weights:", dict(zip(FEATURES, weights, strict=True)))
    print(f"wrote {args.output} (version {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
