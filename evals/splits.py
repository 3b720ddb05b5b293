"""The held-out protocol: every golden question is in exactly one split, fixed and committed.

    python -m evals.splits --write      # assign questions not in evals/splits.yaml yet (never moves one)
    python -m evals.splits --check      # exit 1 when a golden question has no split

- ``train``: what every fitted weight, threshold, boost or rule may be chosen on (the reranker,
  the answer-or-refuse model, fusion weights);
- ``dev``: where a fitting chooses among its candidates (a threshold, a regularisation);
- ``test``: judged only. Nobody tunes on it: a figure from it is a result, a figure from train
  or dev is a development figure and is labelled so.

The golden and paraphrase sets were split once, per pack and set, by the sha256 of each
question's id (60 / 20 / 20); the committed file is the split from then on, so adding questions
never moves an existing one. A set named ``heldout`` (``packs/<pack>/golden/heldout.yaml``:
questions written from randomly drawn passages after the engine's rules were written, each with
the ``fact`` its answer must state) is all test.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import yaml

from rag_engine import DEFAULT_CONFIG, yaml_safe
from rag_engine.config import load_config
from rag_engine.errors import EvalInputError

Split = Literal["train", "dev", "test"]
SPLITS: tuple[Split, ...] = ("train", "dev", "test")
SPLITS_FILE = Path(__file__).with_name("splits.yaml")
HELDOUT_SET = "heldout"


def hashed_split(query_id: str) -> Split:
    """60 / 20 / 20 by the id's sha256: how a question not yet in the file is assigned."""
    bucket = int(hashlib.sha256(query_id.encode()).hexdigest()[:8], 16) % 10
    return "train" if bucket < 6 else ("dev" if bucket < 8 else "test")


def load_splits(path: Path = SPLITS_FILE) -> dict[str, Split]:
    if not path.is_file():
        return {}
    data = yaml_safe.load_file(path) or {}
    out: dict[str, Split] = {}
    for split in SPLITS:
        for qid in data.get(split) or []:
            out[str(qid)] = split
    return out


def split_of(query_id: str, set_name: str | None, splits: dict[str, Split]) -> Split:
    """The committed split of a question (a ``heldout`` set is all test)."""
    if set_name == HELDOUT_SET:
        return "test"
    try:
        return splits[query_id]
    except KeyError:
        raise EvalInputError(
            f"golden question {query_id!r} has no split in {SPLITS_FILE.name}: run python -m evals.splits --write"
        ) from None


def golden_ids(paths: Sequence[Path]) -> list[tuple[str, str | None]]:
    """(id, set name) of every question of the golden files."""
    out = []
    for path in paths:
        data = yaml_safe.load_file(path)
        out += [(str(q["id"]), data.get("set")) for q in data["queries"]]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.splits", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="assign the questions that have no split yet")
    mode.add_argument("--check", action="store_true", help="exit 1 when a question has no split")
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    root = args.config.resolve().parent.parent
    ids = golden_ids([root / p for p in cfg.evals.golden])
    splits = load_splits()
    missing = [qid for qid, set_name in ids if set_name != HELDOUT_SET and qid not in splits]
    if args.check:
        if missing:
            print(f"{len(missing)} golden questions have no split: {missing[:10]}", file=sys.stderr)
            return 1
        print(f"every golden question has a split ({len(ids)} questions)")
        return 0
    for qid in missing:
        splits[qid] = hashed_split(qid)
    body = {s: sorted(q for q, v in splits.items() if v == s) for s in SPLITS}
    header = "# The committed split of every golden question (python -m evals.splits; heldout sets are all test).\n"
    SPLITS_FILE.write_text(header + yaml.safe_dump(body, sort_keys=False, width=120), encoding="utf-8")
    print(f"{len(missing)} assigned; " + ", ".join(f"{s}: {len(body[s])}" for s in SPLITS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
