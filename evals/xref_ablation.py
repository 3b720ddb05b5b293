"""What each reference rule written for a quirk of the gold buys, on dev and on test.

    python -m evals.xref_ablation --output evals/reports/XREF_ABLATION.json   # run, print, write

The ADGM pack's reference rules predate the dev/test split of the gold (``evals.xref_gold``): they
were written while reading misses of all of it, so the test figure of ``evals.xref`` is still
optimistic. This is the measurement that is honest today: each rule that exists for a quirk of
the data (a typo, a lost character, a way the FSRA writes that the gold showed) is turned off in
turn, and its effect on recall and precision is reported per split; then all of them at once.
A rule that buys much more on test than on dev, or whose gain on test cannot be told from dev's,
is the kind of fit the split now guards against. The "all quirk rules off" test row is the
figure a parser without any of these rules gets on test.

Turning a rule off is a named source edit of the pack's module (``ABLATIONS``: the text each rule
is, and what stands in its place), applied to a copy loaded as a separate module; the pack's own
code is never changed. Each edit must match exactly once: when the pack's code moves, the run
fails (exit 2) naming the stale ablation instead of measuring nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evals.xref import DEFAULT_PACK
from evals.xref_gold import GOLD_PATH, SPLIT_NAME, SPLITS, XrefInputError, load_gold, load_split
from evals.xref_resolve import resolve
from evals.xref_score import evaluate
from rag_engine import DEFAULT_CONFIG
from rag_engine.config import load_config, under_root
from rag_engine.engine import project_root
from rag_engine.errors import RagError
from rag_engine.packs import DomainPack, load_pack

SCHEMA = "rag-xref-ablation/1"
PACK_MODULE = Path("packs") / "adgm_rulebooks" / "pack.py"


@dataclass(frozen=True)
class Ablation:
    name: str
    kind: str
    """``data quirk``: a defect of the text; ``FSRA usage``: a way of citing the gold showed."""
    what: str
    edits: tuple[tuple[str, str], ...]
    """(the rule's source text, what stands in its place); each must occur exactly once."""


ABLATIONS: tuple[Ablation, ...] = (
    Ablation(
        "lost_dash",
        "data quirk",
        'two spaces between numbers are a range whose dash the data lost ("Rules 17.1  17.6")',
        ((r"|\s*/\s*|[ ]{2,})", r"|\s*/\s*)"),),
    ),
    Ablation(
        "left_to_right_marks",
        "data quirk",
        "left-to-right marks inside numbers are read as spaces",
        ((r'scan = text.replace("\u200e", " ")', "scan = text"),),
    ),
    Ablation(
        "dotted_letter",
        "data quirk",
        '"15.11.A.1" is read as 15.11A.1',
        (
            (r"|[A-Z](?=\.\d)))*)", r"))*)"),
            (r'num = re.sub(r"\.([A-Z])(?=\.\d)", r"\1", num.strip())', "num = num.strip()"),
        ),
    ),
    Ablation(
        "of_of", "data quirk", '"Rule 4.5 of of MKT" is qualified like "of MKT"', ((r"(?:of\s+of|of|", r"(?:of|"),)
    ),
    Ablation(
        "bare_section_is_fsmr",
        "FSRA usage",
        'a bare "section 92(6)" in a rulebook is the FSMR\'s section',
        (('target = "fsmr"  #', "target = target  #"),),
    ),
    Ablation(
        "own_sections",
        "FSRA usage",
        'guidance numbered by sections keeps "section 3" its own (OWN_SECTIONS)',
        (("and own not in STATUTES | OWN_SECTIONS", "and own not in STATUTES"),),
    ),
    Ablation(
        "part_is_chapter",
        "FSRA usage",
        '"Part 6" of an instrument without parts is its chapter 6',
        (('return base  # "Part 6 of MKT"', 'return f"part{base}"  # "Part 6 of MKT"'),),
    ),
    Ablation(
        "guidance_notes_unit",
        "FSRA usage",
        '"Guidance note 3 of Rule 4.5" cites Rule 4.5',
        ((r"|Guidance\s+notes?\s+\d+\s+(?:of|to|in))", ")"),),
    ),
    Ablation(
        "contained_points",
        "FSRA usage",
        "a rule answers to the points its own text holds (4.3.1(13) finds 4.3.1)",
        (('numbers += [f"{number}({p})" for p in contained_points(text)]', "pass"),),
    ),
    Ablation(
        "appendix_provisions",
        "FSRA usage",
        "an appendix passage answers to the provisions its lines open with (APP 1 holds A1.3)",
        (("numbers += contained_provisions(text)", "pass"),),
    ),
    Ablation(
        "outside_mentions",
        "FSRA usage",
        "standards and bodies outside the data named without a provision (FATF, IFRS, ...) are outside references",
        (("for m in OUTSIDE_MENTION.finditer(scan):", 'for m in OUTSIDE_MENTION.finditer(""):'),),
    ),
)
ALL_OFF = "all_quirk_rules_off"


class StaleAblation(XrefInputError):
    """An ablation's source text no longer occurs exactly once in the pack's module."""


def ablated_source(source: str, ablations: tuple[Ablation, ...]) -> str:
    for ab in ablations:
        for old, new in ab.edits:
            if source.count(old) != 1:
                raise StaleAblation(f"ablation {ab.name}: {old!r} occurs {source.count(old)} times in {PACK_MODULE}")
            source = source.replace(old, new)
    return source


def ablated_pack(pack: DomainPack, root: Path, ablations: tuple[Ablation, ...]) -> DomainPack:
    """The pack built by a copy of its module with ``ablations`` applied (the module is untouched)."""
    source = ablated_source((root / PACK_MODULE).read_text(encoding="utf-8"), ablations)
    module = types.ModuleType(f"xref_ablation_{'_'.join(a.name for a in ablations)}")
    exec(compile(source, str(PACK_MODULE), "exec"), module.__dict__)  # the pack module's own text, edited by ABLATIONS
    built: DomainPack = module.build_pack(pack.entry, pack.manifest, root)
    return built


def _row(scored: dict[str, Any]) -> dict[str, Any]:
    m = scored["metrics"]
    return {
        "recall": m["overall"]["recall"],
        "precision_annotated": m["overall"]["precision_annotated"],
        "tp": m["overall"]["tp"],
        "outsource_recall": m["Outsource"]["recall"],
    }


def ablate(config: str | Path = DEFAULT_CONFIG, pack_name: str = DEFAULT_PACK) -> dict[str, Any]:
    root = project_root()
    cfg = load_config(under_root(root, config))
    entry = cfg.pack(pack_name)
    if entry is None:
        raise XrefInputError(f"no pack {pack_name!r}")
    pack = load_pack(entry, root)
    rows = load_gold(pack.corpus_dir / GOLD_PATH)
    parts = load_split(pack.fixtures_dir / SPLIT_NAME, [r["source_doc"] for r in rows])
    by_split = {s: [r for r in rows if r["source_doc"] in parts[s]] for s in SPLITS}

    def rows_of(p: DomainPack) -> tuple[dict[str, dict[str, Any]], set[tuple[str, str, str]]]:
        """Each split's row, and every (source, target, key) the references resolved to."""
        res = resolve(p, cfg.max_document_bytes)
        links = {(src, dst, key) for (src, dst), made in res.pairs.items() for _, key in made}
        return {s: _row(evaluate(res.citing_from(parts[s]), by_split[s], 0)) for s in SPLITS}, links

    full, full_links = rows_of(pack)
    out = []
    for ablations, name, kind, what in [((a,), a.name, a.kind, a.what) for a in ABLATIONS] + [
        (ABLATIONS, ALL_OFF, "all", "every rule above turned off at once")
    ]:
        off, links = rows_of(ablated_pack(pack, root, ablations))
        bought = {
            s: {
                k: round(full[s][k] - off[s][k], 4) for k in full[s] if full[s][k] is not None and off[s][k] is not None
            }
            for s in SPLITS
        }
        out.append(
            {
                "rule": name,
                "kind": kind,
                "what": what,
                "links_changed": len(full_links ^ links),
                "off": off,
                "bought": bought,
            }
        )
    return {
        "schema": SCHEMA,
        "pack": pack.name,
        "rules_fingerprint": pack.rules_fingerprint(),
        "gold_rows": {s: len(by_split[s]) for s in SPLITS},
        "full": full,
        "ablations": out,
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _fmt(x: float) -> str:
    return f"{x:+.4f}" if x else "0"


def table(report: dict[str, Any]) -> str:
    """What each rule buys (full minus ablated) on dev and test: recall, precision (annotated),
    Outsource recall; and how many (source, target, key) links of the whole corpus it changes."""
    lines = [
        "| rule | kind | resolved links changed | recall bought (dev) | recall bought (test) "
        "| precision (annot.) bought (dev) | precision (annot.) bought (test) "
        "| Outsource recall bought (dev) | Outsource recall bought (test) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for a in report["ablations"]:
        b = a["bought"]
        cells = [_fmt(b[s].get(k, 0.0)) for k in ("recall", "precision_annotated", "outsource_recall") for s in SPLITS]
        lines.append(f"| {a['rule']} | {a['kind']} | {a['links_changed']:,} | " + " | ".join(cells) + " |")
    full, off = report["full"], report["ablations"][-1]["off"]
    lines += [
        "",
        "| split | gold rows | recall (all rules) | recall (quirk rules off) | precision (annot., all rules) "
        "| precision (annot., quirk rules off) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in SPLITS:
        lines.append(
            f"| {s} | {report['gold_rows'][s]:,} | {full[s]['recall']:.3f} | {off[s]['recall']:.3f} "
            f"| {full[s]['precision_annotated']:.3f} | {off[s]['precision_annotated']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m evals.xref_ablation", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG)
    parser.add_argument("--pack", default=DEFAULT_PACK)
    parser.add_argument("--output", required=True, help="where to write the JSON report")
    args = parser.parse_args(argv)
    try:
        report = ablate(args.config, args.pack)
    except (RagError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(table(report))
    print(f"[xref-ablation] {len(report['ablations'])} runs -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
