"""The draw of the cross-reference audit, reproduced: which resolved pairs a person checked by hand.

    python -m evals.xref_audit            # print the draw (type, source, target), one per line
    python -m evals.xref_audit --check    # exit 1 unless the audit file lists exactly this draw

The gold annotates only some references of a passage, so a resolved pair of a reference it does
not annotate ("unjudged") is neither confirmed nor refuted by it. ``golden/xref_audit.yaml`` holds
a person's verdicts on a sample of them, and ``evals.xref`` turns those into a precision estimate.
The sample is drawn here, not chosen: one ``random.Random(sample_seed)``, then ``sample`` of
``SIZES["Internal"]`` from the sorted unjudged Internal extras and of ``SIZES["External"]`` from
the sorted unjudged External ones, in that order. ``--check`` (a test runs it) fails when the audit
lists other pairs, so nobody can swap an awkward pair for an easy one; a new normalizer version
needs a new draw and a new audit.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

from evals import xref
from rag_engine import yaml_safe

SIZES: dict[str, int] = {"Internal": 40, "External": 20}
ROOT = Path(__file__).resolve().parents[1]
AUDIT = ROOT / "packs" / "adgm_rulebooks" / "golden" / xref.AUDIT_NAME


def unjudged(report: dict[str, Any], kind: str) -> list[tuple[str, str]]:
    """The sorted (source, target) pairs of a type that the gold cannot judge."""
    return sorted((e["source"], e["target"]) for e in report["extras"].get(kind, []) if not e["judged"])


def draw(report: dict[str, Any], seed: int) -> list[tuple[str, str, str]]:
    """(type, source, target) of the audit sample, in draw order."""
    rng = random.Random(seed)
    out: list[tuple[str, str, str]] = []
    for kind, size in SIZES.items():
        pool = unjudged(report, kind)
        out += [(kind, s, t) for s, t in rng.sample(pool, min(size, len(pool)))]
    return out


def full_report() -> dict[str, Any]:
    """The xref report with every extra pair listed (the committed one keeps a few per cause)."""
    return xref.run(examples=10**9)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.xref_audit", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 unless the audit file lists this draw")
    args = parser.parse_args(argv)
    audit = yaml_safe.load_file(AUDIT) or {}
    drawn = draw(full_report(), int(audit["sample_seed"]))
    if not args.check:
        print("\n".join(f"{k}\t{s}\t{t}" for k, s, t in drawn))
        return 0
    listed = [(p["type"], p["source"], p["target"]) for p in audit.get("pairs") or []]
    if listed != drawn:
        extra = [p for p in listed if p not in drawn]
        missing = [p for p in drawn if p not in listed]
        print(
            f"{AUDIT.relative_to(ROOT)}: the audited pairs are not the seeded draw "
            f"(listed but not drawn: {extra[:5]}; drawn but not listed: {missing[:5]}; order differs: "
            f"{not extra and not missing})",
            file=sys.stderr,
        )
        return 1
    print(f"{AUDIT.relative_to(ROOT)}: {len(listed)} audited pairs are exactly the draw of seed {audit['sample_seed']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
