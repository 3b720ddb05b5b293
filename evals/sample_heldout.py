"""Draw passages for a pack's held-out test questions, and check the written set.

The held-out set (``packs/<pack>/golden/heldout.yaml``) is questions written from passages drawn
here, never from how the engine ranks anything: the draw reads the corpus through the pack's own
chunker (no store, no server), so anyone can reproduce which passages the questions came from.

Draw (``--pack P --n N``): every chunk of the pack's corpus, chunked with the pack's code, except
chunks already gold in the pack's ``queries.yaml`` or ``paraphrase.yaml`` and chunks of fewer
than 25 words, shuffled with ``random.Random(seed)`` (default 3405), then taken in that order with
at most 3 per document until N are drawn. Prints each passage with its anchor, collection and
heading (``--out FILE`` writes the same text to a file as well, e.g. under var/).

Check (``--check``, every pack with a heldout.yaml, or ``--pack P``): each gold anchor is a chunk
of the corpus, the first (the drawn passage) is not gold in a tuned set, the question's role may
read every gold anchor, each answerable question's ``fact`` (one phrase or a list of
alternatives) occurs in at least one gold chunk's text (case-insensitive, whitespace collapsed;
a list: every alternative does, in some gold chunk), a forbidden-collection question's
``answer_in`` anchors exist and are ones its role may not read, and no id repeats. Exit status 1
on any problem.

    python -m evals.sample_heldout --pack legal_regulatory --n 60
    python -m evals.sample_heldout --check
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from rag_engine import yaml_safe
from rag_engine.config import load_config
from rag_engine.ingest.documents import discover, load_document
from rag_engine.packs import ChunkRecord, DomainPack, load_pack

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "config" / "engine.yaml"
SEED = 3405
MIN_WORDS = 25
PER_DOCUMENT = 3
TRAINED_SETS = ("queries.yaml", "paraphrase.yaml")
HELDOUT = "heldout.yaml"


def _pack(name: str) -> tuple[Any, DomainPack]:
    cfg = load_config(CONFIG)
    entry = next((e for e in cfg.packs if e.name == name), None)
    if entry is None:
        raise SystemExit(f"no pack {name!r} in {CONFIG.relative_to(ROOT)}")
    return cfg, load_pack(entry, ROOT)


def corpus_chunks(pack: DomainPack, max_bytes: int) -> list[ChunkRecord]:
    """Every chunk of the pack's corpus, in sorted path order, chunked by the pack's own code."""
    chunks: list[ChunkRecord] = []
    for ref in discover(pack):
        doc = load_document(pack, ref.partition_key, max_bytes=max_bytes)
        chunks.extend(pack.chunk(doc))
    return chunks


def _golden_dir(pack: DomainPack) -> Path:
    return ROOT / pack.entry.fixtures


def _load(path: Path) -> dict[str, Any]:
    return yaml_safe.load_file(path) or {}


def trained_anchors(pack: DomainPack) -> set[str]:
    """Anchors already gold in the sets the engine was designed and tuned on."""
    out: set[str] = set()
    for name in TRAINED_SETS:
        path = _golden_dir(pack) / name
        if path.is_file():
            for q in _load(path).get("queries") or []:
                out.update(str(a) for a in q.get("gold") or [])
    return out


def draw(chunks: list[ChunkRecord], exclude: set[str], n: int, seed: int = SEED) -> list[ChunkRecord]:
    pool = [c for c in chunks if c.anchor not in exclude and len(c.text.split()) >= MIN_WORDS]
    random.Random(seed).shuffle(pool)
    per_doc: Counter[str] = Counter()
    out: list[ChunkRecord] = []
    for c in pool:
        if per_doc[c.doc_id] >= PER_DOCUMENT:
            continue
        per_doc[c.doc_id] += 1
        out.append(c)
        if len(out) >= n:
            break
    return out


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def check(pack: DomainPack, cfg: Any) -> list[str]:
    path = _golden_dir(pack) / HELDOUT
    data = _load(path)
    by_anchor = {c.anchor: c for c in corpus_chunks(pack, cfg.max_document_bytes)}
    trained = trained_anchors(pack)
    problems: list[str] = []
    where = f"{pack.name}/{HELDOUT}"
    if data.get("pack") != pack.name:
        problems.append(f"{where}: names pack {data.get('pack')!r}")
    ids = Counter(q.get("id") for q in data.get("queries") or [])
    problems += [f"{where}: id {qid!r} repeats" for qid, k in ids.items() if k > 1]
    for q in data.get("queries") or []:
        qid = f"{where}:{q.get('id')}"
        role = q.get("role") or data.get("role")
        readable = set(cfg.roles.get(role, ())) if role else None
        if role and role not in cfg.roles:
            problems.append(f"{qid}: role {role!r} is not configured")
        answerable = not q.get("insufficient_evidence")
        gold = [str(a) for a in q.get("gold") or []]
        withheld = [str(a) for a in q.get("answer_in") or []]
        for anchor in gold + withheld:
            if anchor not in by_anchor:
                problems.append(f"{qid}: anchor {anchor!r} is no chunk of the corpus")
        if gold and gold[0] in trained:  # the drawn passage comes first; a second anchor may be gold elsewhere
            problems.append(f"{qid}: its drawn passage {gold[0]!r} is already gold in a tuned set")
        for anchor in gold:
            if anchor in by_anchor and readable is not None and by_anchor[anchor].collection not in readable:
                problems.append(f"{qid}: role {role!r} may not read {anchor!r}")
        for anchor in withheld:  # a forbidden-collection question: the answer exists, the role may not read it
            if anchor in by_anchor and readable is not None and by_anchor[anchor].collection in readable:
                problems.append(f"{qid}: role {role!r} may read {anchor!r}; not a forbidden-collection question")
        if not answerable:
            if gold:
                problems.append(f"{qid}: insufficient_evidence with gold anchors")
            continue
        if not gold:
            problems.append(f"{qid}: answerable but no gold anchor")
        fact = q.get("fact")
        alternatives = [fact] if isinstance(fact, str) else list(fact or [])
        if not alternatives or not all(isinstance(f, str) and f.strip() for f in alternatives):
            problems.append(f"{qid}: answerable but no fact phrase")
            continue
        texts = [_norm(by_anchor[a].text) for a in gold if a in by_anchor]
        for f in alternatives:
            if not any(_norm(f) in t for t in texts):
                problems.append(f"{qid}: fact {f!r} is not in the text of any gold chunk")
    return problems


def _show(c: ChunkRecord) -> str:
    return f"=== {c.anchor}  [{c.collection}]  {c.heading}\n{c.text.strip()}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pack", help="pack name (config/engine.yaml)")
    ap.add_argument("--n", type=int, default=60, help="passages to draw (default 60)")
    ap.add_argument("--seed", type=int, default=SEED, help=f"random seed (default {SEED})")
    ap.add_argument("--out", type=Path, help="also write the drawn passages to this file")
    ap.add_argument("--check", action="store_true", help="check heldout.yaml instead of drawing")
    args = ap.parse_args(argv)
    if args.check:
        cfg = load_config(CONFIG)
        names = [args.pack] if args.pack else [e.name for e in cfg.packs]
        problems: list[str] = []
        checked = 0
        for name in names:
            cfg, pack = _pack(name)
            if not (_golden_dir(pack) / HELDOUT).is_file():
                if args.pack:
                    problems.append(f"{name}: no {HELDOUT}")
                continue
            checked += 1
            problems += check(pack, cfg)
        for p in problems:
            print(p, file=sys.stderr)
        print(f"{checked} held-out set(s) checked, {len(problems)} problem(s)")
        return 1 if problems or not checked else 0
    if not args.pack:
        ap.error("--pack is needed to draw")
    cfg, pack = _pack(args.pack)
    drawn = draw(corpus_chunks(pack, cfg.max_document_bytes), trained_anchors(pack), args.n, args.seed)
    text = "".join(_show(c) for c in drawn)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
