"""Convert the GDPRtEXT JSON into this pack's Markdown corpus.

The JSON holds chapters -> articles -> points -> subpoints, plus the recitals.

Why Markdown and not the JSON: the engine ingests documents as text files with content-hash
versions, and a reviewer can read and diff the corpus. The Markdown shape is the contract the
pack's chunker parses, so keep the two in step:

    # Chapter II — Principles
    ## Section 1 — ...                     (only in chapters that have sections)
    ## Article 5 — Principles relating to processing of personal data
    1. Personal data shall be:
    (a) processed lawfully, ...
    - an unnumbered indent
    Unnumbered subparagraph text (belongs to the paragraph above it)

Recitals go into files of RECITALS_PER_FILE recitals each (``## Recital 12`` then its text).
The output is deterministic: running the script twice gives byte-identical files.

Usage (from the repository root)::

    python -m packs.legal_regulatory.build_corpus ../shared/corpora/gdpr/gdpr.json
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from packs.legal_regulatory.pack import roman_to_int

PACK_DIR = Path(__file__).resolve().parent
REPO_ROOT = PACK_DIR.parents[1]
DEFAULT_SOURCE = Path("..") / "shared" / "corpora" / "gdpr" / "gdpr.json"
DEFAULT_OUT = PACK_DIR / "corpus"
RECITALS_PER_FILE = 50
DASH = "\u2014"


def _clean(text: str | None) -> str:
    """One line of text: the source has stray newlines and double spaces inside sentences."""
    return re.sub(r"\s+", " ", text or "").strip()


def _paragraphs(text: str | None) -> list[str]:
    """Recital text keeps its own paragraph breaks (blank lines in the source)."""
    return [p for p in (_clean(part) for part in re.split(r"\n\s*\n", text or "")) if p]


def _render_subpoints(subpoints: list[dict[str, Any]]) -> list[str]:
    lines = []
    for sub in subpoints:
        text = _clean(sub.get("text"))
        if not text:
            continue
        number = sub.get("number")
        lines.append(f"({number}) {text}" if number else f"- {text}")
    return lines


def render_article(article: dict[str, Any]) -> list[str]:
    lines = [f"## Article {article['number']} {DASH} {_clean(article['title'])}", ""]
    for block in article["contents"]:
        text = _clean(block.get("text"))
        number = block.get("number")
        head = f"{number}. {text}" if number else text
        body = ([head] if text else []) + _render_subpoints(block.get("subpoints") or [])
        if body:
            lines.extend(body)
            lines.append("")
    return lines


def render_chapter(chapter: dict[str, Any]) -> str:
    lines = [f"# Chapter {chapter['number']} {DASH} {_clean(chapter['title'])}", ""]
    for item in chapter["contents"]:
        if item["type"] == "section":
            lines += [f"## Section {item['number']} {DASH} {_clean(item['title'])}", ""]
            for article in item["contents"]:
                lines += render_article(article)
        elif item["type"] == "article":
            lines += render_article(item)
        else:
            raise ValueError(f"chapter {chapter['number']}: unexpected item type {item['type']!r}")
    return "\n".join(lines).rstrip("\n") + "\n"


def render_recitals(recitals: list[dict[str, Any]]) -> str:
    first, last = recitals[0]["number"], recitals[-1]["number"]
    lines = [f"# Recitals {first}\u2013{last}", ""]
    for recital in recitals:
        lines += [f"## Recital {recital['number']}", ""]
        for para in _paragraphs(recital.get("text")):
            lines += [para, ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def build(source: Path, out_dir: Path) -> list[Path]:
    data = json.loads(source.read_text(encoding="utf-8"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("gdpr-*.md"):
        stale.unlink()
    written: list[Path] = []
    for chapter in data["chapters"]:
        path = out_dir / f"gdpr-ch{roman_to_int(chapter['number']):02d}.md"
        path.write_text(render_chapter(chapter), encoding="utf-8")
        written.append(path)
    recitals = sorted(data["recitals"], key=lambda r: int(r["number"]))
    for start in range(0, len(recitals), RECITALS_PER_FILE):
        batch = recitals[start : start + RECITALS_PER_FILE]
        first, last = int(batch[0]["number"]), int(batch[-1]["number"])
        path = out_dir / f"gdpr-recitals-{first:03d}-{last:03d}.md"
        path.write_text(render_recitals(batch), encoding="utf-8")
        written.append(path)
    notice = source.with_name("NOTICE.md")
    if notice.is_file():
        shutil.copyfile(notice, out_dir / "NOTICE.md")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "source",
        nargs="?",
        default=None,
        help=f"path to gdpr.json (default: {DEFAULT_SOURCE} relative to the repository root)",
    )
    parser.add_argument("--out", default=None, help="output directory (default: this pack's corpus/)")
    args = parser.parse_args(argv)
    source = Path(args.source) if args.source else REPO_ROOT / DEFAULT_SOURCE
    out_dir = Path(args.out) if args.out else DEFAULT_OUT
    if not source.is_file():
        print(f"source not found: {source}", file=sys.stderr)
        return 2
    for path in build(source, out_dir):
        print(f"{path.name}\t{path.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
