"""The cross-reference gold and its committed dev/test split.

    python -m evals.xref_gold            # print the split the rule draws (YAML)
    python -m evals.xref_gold --write    # write it to the pack's golden/xref_split.yaml
    python -m evals.xref_gold --check    # exit 1 unless the committed split is the rule's draw (a test runs it)

The gold (``<corpus>/gold/xref_links.jsonl``, one ``{type, source_doc, source_passage,
reference_text, target_doc, target_passage}`` a line) is split by **citing document**, so no
instrument's references straddle dev and test: a document is ``test`` when the first 8 hex digits
of ``sha256("<SALT>:<doc_id>")`` read as a fraction of 2**32 are below ``TEST_SHARE``, else
``dev``. The rule names no document and was fixed before its draw was seen; a document added to
the corpus later falls where its hash puts it. Every gold row and every resolved pair belongs to
the split of the document it is cited from (a pair's target may be in either).

From the split on, the pack's reference rules may be written only against dev: read dev's misses
and extras, never test's (docs/packs.md). Today's rules predate the split and were written
against all of the gold, so today's test figure is still optimistic: ``evals.xref_ablation``
measures what each rule written for a quirk of the gold buys on dev and on test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from rag_engine import yaml_safe
from rag_engine.errors import RagError

GOLD_PATH = Path("gold") / "xref_links.jsonl"
SPLIT_NAME = "xref_split.yaml"
"""In the pack's fixtures directory: the committed dev/test documents."""
PAIR_TYPES = ("Internal", "External")
TYPES = (*PAIR_TYPES, "Outsource")
SPLITS = ("dev", "test")
SALT = "adgm-xref-split/1"
TEST_SHARE = 1 / 3


class XrefInputError(RagError):
    """Bad input to the xref eval (exit 2)."""


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


def split_of(doc_id: str) -> str:
    """``dev`` or ``test``: the rule of the module docstring."""
    digest = hashlib.sha256(f"{SALT}:{doc_id}".encode()).hexdigest()
    return "test" if int(digest[:8], 16) / 2**32 < TEST_SHARE else "dev"


def draw(docs: list[str]) -> dict[str, Any]:
    """The split of ``docs`` as the committed file holds it."""
    return {
        "rule": f"test when int(sha256('{SALT}:<doc_id>')[:8], 16) / 2**32 < {TEST_SHARE:.4f}, by citing document",
        **{s: sorted(d for d in set(docs) if split_of(d) == s) for s in SPLITS},
    }


def load_split(path: Path, docs: list[str]) -> dict[str, set[str]]:
    """The committed split, refused when a citing document of the gold is in neither part or in both."""
    try:
        split = yaml_safe.load_file(path) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise XrefInputError(f"{path}: {exc}") from None
    parts = {s: set(split.get(s) or ()) for s in SPLITS}
    if parts["dev"] & parts["test"]:
        raise XrefInputError(f"{path}: in dev and test: {sorted(parts['dev'] & parts['test'])}")
    unsplit = sorted(set(docs) - parts["dev"] - parts["test"])
    if unsplit:
        raise XrefInputError(
            f"{path}: documents of the gold in no split: {unsplit} (python -m evals.xref_gold --write)"
        )
    return parts


def _gold_docs(root: Path, pack_dir: str = "packs/adgm_rulebooks") -> list[str]:
    rows = load_gold(root / pack_dir / "corpus" / GOLD_PATH)
    return sorted({r["source_doc"] for r in rows})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.xref_gold", description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="exit 1 unless the committed split is the rule's draw")
    mode.add_argument("--write", action="store_true", help="write the rule's draw to the committed file")
    args = parser.parse_args(argv)
    root = Path(__file__).resolve().parents[1]
    path = root / "packs" / "adgm_rulebooks" / "golden" / SPLIT_NAME
    drawn = draw(_gold_docs(root))
    text = "# The dev/test split of the cross-reference gold: python -m evals.xref_gold --write\n" + yaml.safe_dump(
        drawn, sort_keys=False
    )
    if args.write:
        path.write_text(text, encoding="utf-8")
        print(f"{path.relative_to(root)}: dev {len(drawn['dev'])}, test {len(drawn['test'])} documents")
        return 0
    if not args.check:
        print(text, end="")
        return 0
    committed = yaml_safe.load_file(path) if path.is_file() else None
    if committed != drawn:
        print(f"{path.relative_to(root)} is not the rule's draw: python -m evals.xref_gold --write", file=sys.stderr)
        return 1
    print(f"{path.relative_to(root)}: the rule's draw (dev {len(drawn['dev'])}, test {len(drawn['test'])} documents)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
