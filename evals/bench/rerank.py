"""Query latency with and without one stage, paired question by question.

    python -m evals.bench.rerank [--stage rerank|sentences] [--repeat 3] [--json out.json]

On an ingested store, every golden and paraphrase question (``evals.golden``) runs through
``retrieve()`` twice per repeat, once with the stage and once without (``rerank``: the feature
reranker on / off; ``sentences``: the reranker on, with / without sentence evidence, i.e. the
top candidates' unit vectors read and scored), the order alternating from one question to the
next, so the machine's load moves both alike. Prints p50 / p95 of each and the paired ratio (per
question: with / without), median over repeats.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from evals.runner import default_role, load_golden
from rag_engine import DEFAULT_CONFIG
from rag_engine.engine import Engine
from rag_engine.retrieval.retriever import retrieve


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="paired query latency with / without one stage")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    parser.add_argument("--stage", choices=("rerank", "sentences"), default="rerank")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    engine = Engine.from_path(args.config)
    questions = []
    for path in engine.cfg.evals.golden:
        golden = load_golden(engine.root / path)
        role = golden.get("role") or default_role(engine, golden["pack"])
        questions += [(q["question"], q.get("role", role)) for q in golden["queries"]]

    def run(q: str, role: str, flag: bool) -> None:
        if args.stage == "rerank":
            retrieve(engine, q, role, rerank=flag)
        else:
            retrieve(engine, q, role, rerank=True, units=flag)

    for q, role in questions[:5]:  # warm caches (index, eligible edges, weights file)
        run(q, role, True)
    repeats = []
    for _ in range(args.repeat):
        on: list[float] = []
        off: list[float] = []
        for i, (q, role) in enumerate(questions):
            for flag in (True, False) if i % 2 == 0 else (False, True):
                started = time.perf_counter()
                run(q, role, flag)
                (on if flag else off).append((time.perf_counter() - started) * 1000)
        ratio = [a / b for a, b in zip(on, off, strict=True)]
        repeats.append(
            {
                "with_p50": float(np.percentile(on, 50)),
                "with_p95": float(np.percentile(on, 95)),
                "without_p50": float(np.percentile(off, 50)),
                "without_p95": float(np.percentile(off, 95)),
                "ratio_p50": float(np.percentile(ratio, 50)),
            }
        )
    engine.close()
    summary = {k: round(statistics.median(r[k] for r in repeats), 2) for k in repeats[0]}
    out = {"stage": args.stage, "questions": len(questions), "repeats": repeats, "median": summary}
    print(f"{len(questions)} questions x {args.repeat} repeats (ms, median over repeats)")
    print(f"  with {args.stage}    p50 {summary['with_p50']:.1f}  p95 {summary['with_p95']:.1f}")
    print(f"  without {args.stage} p50 {summary['without_p50']:.1f}  p95 {summary['without_p95']:.1f}")
    print(f"  paired ratio with/without, p50 over questions: {summary['ratio_p50']:.2f}")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
