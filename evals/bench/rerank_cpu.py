"""The rerank stage's word work per question, the engine's code against the frozen old one
(``evals.bench.rerank_reference``), on the same inputs, no store.

    python -m evals.bench.rerank_cpu [--repeat 7] [--questions 150] [--json out.json]

Inputs: the golden questions (``evals.golden``), each with 20 candidates (``retrieval.rerank.top_n``)
of its own pack's chunks (the shipped corpora chunked by their packs), the 20 sharing most content
stems with the question, each with a seeded random unit-vector blob of the shape the index stores
(``min(units, MAX_UNITS)`` x 384, float16). Per question, what ``rerank_stage`` does after its store
reads: the question's stems, each candidate's context stems (title and heading) and sentence
evidence (``score_chunk``), the evidence features and each candidate's ``text_features``. Each
repeat times every question through both versions, interleaved, the order alternating; prints
the median ms per question over repeats (wall clock and CPU time) with the load average beside
it, and checks the two outputs are equal (exit 1 if not).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evals.bench import rerank_reference as old
from evals.runner import load_golden
from rag_engine.engine import Engine
from rag_engine.ingest.documents import discover, load_document
from rag_engine.retrieval.rerank import question_stems, text_features
from rag_engine.retrieval.sentence_evidence import ChunkEvidence, evidence_features, normalized, score_chunk
from rag_engine.store.units import encode
from rag_engine.text.sentences import MAX_UNITS
from rag_engine.text.terms import content_stems

DIMENSION = 384
TOP_N = 20


@dataclass(frozen=True)
class Passage:
    chunk_id: str
    title: str
    heading: str
    text: str


@dataclass(frozen=True)
class Case:
    question: str
    candidates: tuple[Passage, ...]
    blobs: tuple[bytes, ...]


def pack_passages(engine: Engine) -> dict[str, list[Passage]]:
    """Every chunk of every enabled pack's corpus, as its pack chunks it, with its document title."""
    out: dict[str, list[Passage]] = {}
    for name, pack in engine.packs.items():
        for ref in discover(pack):
            doc = load_document(pack, ref.partition_key, max_bytes=engine.cfg.max_document_bytes)
            out.setdefault(name, []).extend(Passage(c.chunk_id, doc.title, c.heading, c.text) for c in pack.chunk(doc))
    return out


def golden_questions(engine: Engine) -> list[tuple[str, str]]:
    """(pack, question) of every golden file of ``evals.golden``, in order."""
    out = []
    for path in engine.cfg.evals.golden:
        golden = load_golden(engine.root / path)
        out += [(str(golden["pack"]), str(q["question"])) for q in golden["queries"]]
    return out


def cases(engine: Engine, limit: int | None = None, seed: int = 40) -> list[Case]:
    """Each question with the ``TOP_N`` passages of its pack sharing most content stems with it."""
    passages = pack_passages(engine)
    stems = {name: [old.content_stems(f"{p.title} {p.heading} {p.text}") for p in ps] for name, ps in passages.items()}
    rng = np.random.default_rng(seed)
    out = []
    for pack, question in golden_questions(engine)[:limit]:
        asked = old.content_stems(question)
        order = sorted(range(len(passages[pack])), key=lambda i: (-len(asked & stems[pack][i]), i))[:TOP_N]
        chosen = tuple(passages[pack][i] for i in order)
        blobs = tuple(
            encode(rng.standard_normal((min(len(old.split_units(p.text)), MAX_UNITS), DIMENSION)).tolist(), DIMENSION)
            for p in chosen
        )
        out.append(Case(question, chosen, blobs))
    return out


Result = tuple[dict[str, ChunkEvidence], list[dict[str, float]], list[dict[str, float]]]


def run_new(case: Case, vec: np.ndarray | None) -> Result:
    """The engine's code, called as ``rerank_stage.sentence_evidence`` and ``features_of`` call it."""
    stems = question_stems(case.question)
    evidence = {}
    for p, blob in zip(case.candidates, case.blobs, strict=True):
        context = content_stems(f"{p.title} {p.heading}")
        evidence[p.chunk_id] = score_chunk(p.chunk_id, p.text, context, stems, vec, blob, None)
    ids = [p.chunk_id for p in case.candidates]
    stems = question_stems(case.question)
    feats = [text_features(stems, p.title, p.heading, p.text, evidence[p.chunk_id].words) for p in case.candidates]
    return evidence, evidence_features(evidence, ids), feats


def run_old(case: Case, vec: np.ndarray | None) -> Result:
    """The frozen old code, called the same way."""
    stems = old.question_stems(case.question)
    evidence = {}
    for p, blob in zip(case.candidates, case.blobs, strict=True):
        context = old.content_stems(f"{p.title} {p.heading}")
        evidence[p.chunk_id] = old.score_chunk(p.chunk_id, p.text, context, stems, vec, blob, None)
    ids = [p.chunk_id for p in case.candidates]
    stems = old.question_stems(case.question)
    feats = [old.text_features(stems, p.title, p.heading, p.text) for p in case.candidates]
    return evidence, old.evidence_features(evidence, ids), feats


def query_vector(seed: int = 41) -> np.ndarray:
    vec = normalized(np.random.default_rng(seed).standard_normal(DIMENSION).tolist())
    assert vec is not None
    return vec


def timed(work: list[Case], vec: np.ndarray | None, new_first: bool) -> dict[str, float]:
    """Milliseconds per question over ``work`` of each version, wall clock and this process's CPU
    time, interleaved question by question (the order alternating), so the machine's load moves
    both alike (CPU time leaves out the time another process held the core)."""
    spent = {"old": 0.0, "new": 0.0, "old_cpu": 0.0, "new_cpu": 0.0}
    for i, case in enumerate(work):
        pair = (("new", run_new), ("old", run_old))
        if (i % 2 == 0) != new_first:
            pair = pair[::-1]
        for name, run in pair:
            wall, cpu = time.perf_counter(), time.process_time()
            run(case, vec)
            spent[f"{name}_cpu"] += time.process_time() - cpu
            spent[name] += time.perf_counter() - wall
    return {name: round(total * 1000 / len(work), 3) for name, total in spent.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the rerank stage's word work: engine code vs the frozen old code")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--questions", type=int, default=None, help="the first N golden questions (default: all)")
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args(argv)
    engine = Engine.from_path()
    work = cases(engine, args.questions)
    engine.close()
    vec = query_vector()
    equal = all(run_new(c, vec) == run_old(c, vec) for c in work)  # also warms both stem caches
    load_before = os.getloadavg()
    repeats: list[dict[str, float]] = []
    for r in range(args.repeat):
        repeats.append(timed(work, vec, new_first=r % 2 == 1))
    med = {k: statistics.median(r[k] for r in repeats) for k in repeats[0]}
    load = os.getloadavg()
    out: dict[str, Any] = {
        "questions": len(work),
        "candidates_per_question": TOP_N,
        "repeats": repeats,
        "median_ms_per_question": {k: round(v, 3) for k, v in med.items()},
        "speedup_wall": round(med["old"] / med["new"], 2),
        "speedup_cpu": round(med["old_cpu"] / med["new_cpu"], 2),
        "outputs_equal": equal,
        "load_average": {"before": [round(x, 2) for x in load_before], "after": [round(x, 2) for x in load]},
        "python": sys.version.split()[0],
    }
    loads = " / ".join(" ".join(f"{x:.2f}" for x in avg) for avg in (load_before, load))
    print(f"{len(work)} questions x {TOP_N} candidates, {args.repeat} repeats, load average (before / after) {loads}")
    print("  ms/question (median)  old      new      old/new")
    print(f"  wall clock            {med['old']:7.2f}  {med['new']:7.2f}  {out['speedup_wall']:.2f}")
    print(f"  process CPU           {med['old_cpu']:7.2f}  {med['new_cpu']:7.2f}  {out['speedup_cpu']:.2f}")
    print(f"  outputs equal: {equal}")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0 if equal else 1


if __name__ == "__main__":
    sys.exit(main())
