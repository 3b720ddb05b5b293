"""Fit the answer-or-refuse model (``rag_engine/retrieval/abstain.py``) under the held-out rule.

    python -m evals.fit_abstain [--config config/engine.yaml] [--output config/abstain.json]
        [--refuse-cost 1.0]

On an ingested store, every TRAIN and DEV question of the configured golden sets (test questions
are never read here) runs through the query path with the abstention off, and its evidence
features (``abstain.FEATURES``) are recorded with its label:

- 1: answerable, and a gold passage is in the ranked top k (answering is right);
- 0: no answer for its role (out of scope, or only in a collection the role may not read);
- answerable questions whose gold was not retrieved are left out (neither answer is right).

A logistic regression (scikit-learn, standardised features, balanced class weights). Train and
dev are pooled (neither is test; dev alone holds too few unanswerable questions to choose a
threshold on): C and the threshold are chosen on 5-fold stratified out-of-fold probabilities as
the pair minimising found-but-refused + ``refuse_cost`` x out-of-scope-answered (rates; ties to
the smaller C and the lower threshold), then the model is fitted on the whole pool. The
out-of-fold figures are printed (development figures); the eval shows the test split.
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
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import Pipeline, make_pipeline
from sklearn.preprocessing import StandardScaler

from evals.runner import default_role, load_golden
from evals.splits import load_splits, split_of
from rag_engine import DEFAULT_CONFIG
from rag_engine.config import EngineConfig
from rag_engine.engine import Engine
from rag_engine.errors import EvalInputError
from rag_engine.retrieval.abstain import FEATURES, AbstainModel, decision_features
from rag_engine.retrieval.query import alias_groups, run_query, store_absent

C_GRID = (0.1, 0.3, 1.0, 3.0)
FOLDS = 5
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
            absent = store_absent(engine, q["question"], cands, outcome.retrieval.collections)
            x = decision_features(q["question"], cands, coverage, aliases, absent)
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
    pool = [r for r in rows if r["split"] in ("train", "dev")]
    x, y = _matrix(pool)
    if (y == 0).sum() < FOLDS or (y == 1).sum() < FOLDS:
        raise EvalInputError(f"train and dev need at least {FOLDS} answerable and {FOLDS} unanswerable questions")

    def pipeline(c: float) -> Pipeline:
        return make_pipeline(StandardScaler(), LogisticRegression(C=c, class_weight="balanced", max_iter=1000))

    def cost(p: np.ndarray, t: float) -> float:
        r = rates(p, y, t)
        return float(r["found_but_refused"] + args.refuse_cost * r["out_of_scope_answered"])

    folds = StratifiedKFold(n_splits=FOLDS, shuffle=True, random_state=7)
    oof = {c: cross_val_predict(pipeline(c), x, y, cv=folds, method="predict_proba")[:, 1] for c in C_GRID}
    _, c, threshold = min((round(cost(oof[c], t), 6), c, t) for c in C_GRID for t in THRESHOLDS)
    fitted = pipeline(c).fit(x, y)
    scaler: StandardScaler = fitted.named_steps["standardscaler"]
    clf: LogisticRegression = fitted.named_steps["logisticregression"]
    figures = {
        "questions": len(pool),
        "unanswerable": int((y == 0).sum()),
        "by_split": {s: sum(1 for r in pool if r["split"] == s) for s in ("train", "dev")},
        "out_of_fold": rates(oof[c], y, threshold),
    }
    coef = tuple(round(float(v), 6) for v in clf.coef_[0])
    version = hashlib.sha256(json.dumps([FEATURES, coef, threshold]).encode()).hexdigest()[:12]
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
            "split": "evals/splits.yaml: train + dev pooled, C and threshold on 5-fold out-of-fold; test never read",
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
