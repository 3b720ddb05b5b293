"""Fit the answer-or-refuse model (``rag_engine/retrieval/abstain.py``) under the held-out rule.

    python -m evals.fit_abstain [--config config/engine.yaml] [--output config/abstain.json]
        [--refuse-cost 1.0]

On an ingested store, every TRAIN and DEV question of the configured golden sets (test questions
are never read here) runs through the query path with the abstention off, and its evidence
features (``abstain.FEATURES``) are recorded with its label:

- 1: answerable, and a gold passage is in the ranked top k (answering is right);
- 0: no answer for its role (out of scope, or only in a collection the role may not read);
- answerable questions whose gold was not retrieved are left out (neither answer is right).

A logistic regression (scikit-learn, standardised features, balanced class weights, C chosen on
dev) is fitted on train. The threshold is chosen on dev: the one minimising found-but-refused +
``refuse_cost`` x out-of-scope-answered (rates), ties to the lower threshold. Train and dev
figures are printed (development figures); the eval shows the test split.
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
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from evals.runner import default_role, load_golden
from evals.splits import load_splits, split_of
from rag_engine import DEFAULT_CONFIG
from rag_engine.config import EngineConfig
from rag_engine.engine import Engine
from rag_engine.errors import EvalInputError
from rag_engine.retrieval.abstain import FEATURES, AbstainModel, decision_features
from rag_engine.retrieval.query import alias_groups, run_query

C_GRID = (0.1, 0.3, 1.0, 3.0)
THRESHOLDS = tuple(round(t, 2) for t in np.arange(0.05, 0.96, 0.05))


def _no_abstain(cfg: EngineConfig) -> EngineConfig:
    retrieval = cfg.retrieval.model_copy(
        update={"evidence": cfg.retrieval.evidence.model_copy(update={"abstain": None}), "min_evidence_coverage": 0.0}
    )
    return cfg.model_copy(update={"retrieval": retrieval})


def collect(engine: Engine, paths: Sequence[Path]) -> list[dict[str, Any]]:
    """One row per train/dev question that has a label: its split, label and features."""
    from rag_engine.retrieval.evidence import evidence_coverage

    splits = load_splits()
    rows = []
    for path in paths:
        golden = load_golden(path)
        role_default = golden.get("role") or default_role(engine, golden["pack"])
        for q in golden["queries"]:
            split = split_of(q["id"], golden.get("set"), splits)
            if split == "test":
                continue
            role = q.get("role", role_default)
            outcome = run_query(engine, q["question"], role, generate=False, local_inference=False, run_id="fit")
            cands = outcome.retrieval.candidates
            if q.get("insufficient_evidence"):
                label = 0
            elif set(q.get("gold") or []) & {c.anchor for c in cands}:
                label = 1
            else:
                continue
            aliases = alias_groups(engine, outcome.retrieval.collections)
            coverage = evidence_coverage(q["question"], outcome.context.documents, aliases)
            x = decision_features(q["question"], cands, coverage, aliases)
            rows.append({"id": q["id"], "pack": golden["pack"], "split": split, "label": label, "x": x})
    return rows


def _matrix(rows: Sequence[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([[r["x"][f] for f in FEATURES] for r in rows], dtype=float)
    return x, np.array([r["label"] for r in rows])


def rates(p: np.ndarray, y: np.ndarray, threshold: float) -> dict[str, float]:
    answer = p >= threshold
    found, none = y == 1, y == 0
    return {
        "found_but_refused": round(float((~answer & found).sum() / max(1, found.sum())), 4),
        "out_of_scope_answered": round(float((answer & none).sum() / max(1, none.sum())), 4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.fit_abstain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    parser.add_argument("--output", default="config/abstain.json")
    parser.add_argument("--refuse-cost", type=float, default=1.0, help="weight of out-of-scope-answered vs refused")
    args = parser.parse_args(argv)
    engine = Engine.from_path(args.config)
    engine.cfg = _no_abstain(engine.cfg)
    try:
        rows = collect(engine, [engine.root / p for p in engine.cfg.evals.golden])
    finally:
        engine.close()
    train = [r for r in rows if r["split"] == "train"]
    dev = [r for r in rows if r["split"] == "dev"]
    xt, yt = _matrix(train)
    xd, yd = _matrix(dev)
    if len(set(yt)) < 2 or len(set(yd)) < 2:
        raise EvalInputError("train and dev each need answerable and unanswerable questions")
    scaler = StandardScaler().fit(xt)

    def fitted(c: float) -> LogisticRegression:
        return LogisticRegression(C=c, class_weight="balanced", max_iter=1000).fit(scaler.transform(xt), yt)

    def cost(p: np.ndarray, y: np.ndarray, t: float) -> float:
        r = rates(p, y, t)
        return float(r["found_but_refused"] + args.refuse_cost * r["out_of_scope_answered"])

    best: tuple[float, float, float] | None = None  # (cost, C, threshold)
    for c in C_GRID:
        pd = fitted(c).predict_proba(scaler.transform(xd))[:, 1]
        for t in THRESHOLDS:
            key = (round(cost(pd, yd, t), 6), c, t)
            if best is None or key < best:
                best = key
    assert best is not None
    _, c, threshold = best
    clf = fitted(c)
    pt = clf.predict_proba(scaler.transform(xt))[:, 1]
    pd = clf.predict_proba(scaler.transform(xd))[:, 1]
    coef = tuple(round(float(v), 6) for v in clf.coef_[0])
    version = hashlib.sha256(json.dumps([FEATURES, coef, threshold]).encode()).hexdigest()[:12]
    figures = {
        "train": {"questions": len(train), "unanswerable": int((yt == 0).sum()), **rates(pt, yt, threshold)},
        "dev": {"questions": len(dev), "unanswerable": int((yd == 0).sum()), **rates(pd, yd, threshold)},
    }
    model = AbstainModel(
        version=version,
        features=FEATURES,
        coef=coef,
        intercept=round(float(clf.intercept_[0]), 6),
        mean=tuple(round(float(v), 6) for v in scaler.mean_),
        scale=tuple(round(float(v), 6) for v in scaler.scale_),
        threshold=threshold,
        fitted_on={
            "script": "python -m evals.fit_abstain",
            "method": "sklearn LogisticRegression(class_weight=balanced) on standardised features",
            "split": "evals/splits.yaml: fitted on train; C and threshold chosen on dev; test never read",
            "C": c,
            "refuse_cost": args.refuse_cost,
            "embedder": engine.embedder_identity,
            "figures (development)": figures,
        },
    )
    Path(args.output).write_text(json.dumps(model.model_dump(), indent=2) + "\n", encoding="utf-8")
    print(json.dumps(figures, indent=1))
    print("coef:", dict(zip(FEATURES, coef, strict=True)), "threshold", threshold, "C", c)
    print(f"wrote {args.output} (version {version})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
