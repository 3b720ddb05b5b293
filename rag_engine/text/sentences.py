"""A chunk's answerable units: its sentences, list items and table rows, with their offsets.

Sentence evidence (``rag_engine.retrieval.sentence_evidence``) reads a question against each
unit of the top passages instead of the passage as a whole, and the extractive answer quotes
the units that answer. The split is deterministic and needs no model:

- **table rows**: a Markdown table's body row is one unit ("Customer support tickets | 3 years |
  ticket closure"); the text embedded for it names each cell by its column ("Data category:
  Customer support tickets; Retention period: 3 years; Starts from: ticket closure"), so the
  row is found by what its columns mean;
- **list items** ("- ", "* ", "1. ", "(a) ") are units of their own;
- **prose** is cut after ``.``, ``!`` or ``?`` followed by a space and a capital, digit or
  opening bracket, and before an enumerated point ("; (b) ..."), never after a known abbreviation
  ("e.g.", "Art.", "No.") or a lone initial;
- a unit of fewer than ``MIN_WORDS`` words joins the next one (a heading-like fragment is not
  evidence on its own).

``SPLITTER_VERSION`` names this rule set: the index step stores it with the vectors, and vectors
made under another version are not used (the count would not line up).
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from rag_engine.text.analyzer import ASCII_WORD_FOLD

SPLITTER_VERSION = "1"
MIN_WORDS = 4
MAX_UNITS = 40
"""Units embedded per chunk; the rest are scored by their words only."""
MAX_UNIT_CHARS = 600
"""A longer unit is cut at a word boundary for embedding (its display text stays whole)."""

_ABBREVIATIONS = frozenset(
    [
        "e.g",
        "i.e",
        "etc",
        "art",
        "arts",
        "no",
        "nos",
        "para",
        "paras",
        "cf",
        "vs",
        "mr",
        "mrs",
        "ms",
        "dr",
        "st",
        "sec",
        "ch",
        "p",
        "pp",
        "fig",
        "ltd",
        "inc",
        "co",
        "eu",
        "approx",
        "min",
        "max",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "reg",
        "regs",
        "sub",
        "rev",
        "vol",
    ]
)
_END = re.compile(r"([.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9])")
_POINT = re.compile(r";\s+(?:and\s+|or\s+)?(?=\((?:[a-z]{1,4}|\d{1,3})\)\s)")
_LIST_ITEM = re.compile(r"^\s*(?:[-*\u2022]|\d{1,3}[.)]|\((?:[a-z]{1,4}|\d{1,3})\))\s+")
_TABLE_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}")
_WORD = re.compile(r"[^\W_]+")
_AT_LEAST_MIN_WORDS = re.compile(rf"[^\W_]+(?:[\W_]+[^\W_]+){{{MIN_WORDS - 1}}}").search
"""Finds ``MIN_WORDS`` runs of letters and digits (``_words(text) >= MIN_WORDS``) without counting
them all: it stops at the fourth word, and ``_WORD`` and its complement never overlap, so it does
not backtrack."""


@dataclass(frozen=True)
class Unit:
    """One answerable unit of a chunk's text: ``text`` as shown (whitespace collapsed),
    ``embed_text`` as embedded, ``start``/``end`` its span in the chunk's text."""

    start: int
    end: int
    text: str
    embed_text: str


def _words(text: str) -> int:
    """How many runs of letters and digits ``text`` holds (ASCII text counted by ``ASCII_WORD_FOLD``,
    the same runs at a third of the pattern's cost)."""
    if text.isascii():
        return len(text.encode("ascii").translate(ASCII_WORD_FOLD).split())
    return len(_WORD.findall(text))


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _prose_cuts(text: str, base: int) -> list[tuple[int, int]]:
    """Spans (absolute) of the sentences of one prose block starting at ``base``."""
    cuts: list[int] = []
    for m in _END.finditer(text):
        if m.group(1) == ".":  # not after an abbreviation or a lone initial
            before = text[: m.start(1)].rsplit(None, 1)
            word = before[-1].lower().lstrip("(\"'") if before else ""
            if word.rstrip(".") in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
                continue
        cuts.append(m.end())
    cuts += [m.start() + 1 for m in _POINT.finditer(text)]
    bounds = [0, *sorted(set(cuts)), len(text)]
    spans = []
    for a, b in itertools.pairwise(bounds):
        piece = text[a:b]
        lead = len(piece) - len(piece.lstrip())
        trail = len(piece.rstrip())
        if trail > lead:
            spans.append((base + a + lead, base + a + trail))
    return spans


def _blocks(text: str) -> list[tuple[str, int, int, str]]:
    """(kind, start, end, embed prefix) of each table row, list item or prose paragraph."""
    out: list[tuple[str, int, int, str]] = []
    header: list[str] | None = None
    para_start: int | None = None
    para_end = 0
    pos = 0
    for line in text.split("\n"):
        start, end = pos, pos + len(line)
        pos = end + 1
        stripped = line.strip()
        is_table = stripped.startswith("|") and stripped.count("|") >= 2
        if para_start is not None and (not stripped or is_table or _LIST_ITEM.match(line)):
            out.append(("prose", para_start, para_end, ""))
            para_start = None
        if not stripped:
            header = None
            continue
        if is_table:
            if _TABLE_SEPARATOR.match(stripped):
                continue
            if header is None:
                header = _cells(stripped)
                continue
            out.append(("row", start, end, "; ".join(header)))
            continue
        header = None
        if _LIST_ITEM.match(line):
            out.append(("item", start, end, ""))
            continue
        if para_start is None:
            para_start = start
        para_end = end
    if para_start is not None:
        out.append(("prose", para_start, para_end, ""))
    return out


def _row_text(line: str, header: str) -> tuple[str, str]:
    cells = _cells(line)
    names = header.split("; ")
    shown = " | ".join(c for c in cells if c)
    if len(names) != len(cells):
        return shown, shown
    return shown, "; ".join(f"{n}: {c}" for n, c in zip(names, cells, strict=True) if c)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_UNIT_CHARS else text[:MAX_UNIT_CHARS].rsplit(" ", 1)[0]


def split_units(text: str) -> list[Unit]:
    """The units of ``text`` in order (see the module docstring)."""
    raw: list[tuple[int, int, str, str]] = []
    for kind, start, end, header in _blocks(text):
        if kind == "row":
            shown, embedded = _row_text(text[start:end], header)
            raw.append((start, end, shown, embedded))
            continue
        spans = _prose_cuts(text[start:end], start) if kind == "prose" else [(start, end)]
        # a long list item reads as prose (41 words take at least 81 characters)
        if kind == "item" and end - start > 80 and _words(text[start:end]) > 40:
            spans = _prose_cuts(text[start:end], start)
        for a, b in spans:
            shown = " ".join(text[a:b].split())
            raw.append((a, b, shown, shown))
    units: list[Unit] = []
    pending: tuple[int, str, str] | None = None
    for start, end, shown, embedded in raw:
        if pending is not None:
            start, shown, embedded = pending[0], f"{pending[1]} {shown}", f"{pending[2]} {embedded}"
            pending = None
        if _AT_LEAST_MIN_WORDS(shown) is None:
            pending = (start, shown, embedded)
            continue
        units.append(Unit(start, end, shown, _clip(embedded)))
    if pending is not None:
        if units:
            last = units[-1]
            units[-1] = Unit(last.start, len(text.rstrip()), f"{last.text} {pending[1]}", _clip(last.embed_text))
        elif pending[1].strip():
            units.append(Unit(pending[0], len(text.rstrip()), pending[1], _clip(pending[2])))
    return units


def embedded_passage(heading: str, text: str) -> str:
    """What is embedded for a passage: its heading, then its text. Ingest, a re-index and a live
    row all embed this, so one text has one vector (and one cache entry) wherever it comes from."""
    return f"{heading}\n{text}"


def embedded_units(heading: str, text: str) -> list[str]:
    """The texts embedded for a chunk's first ``MAX_UNITS`` units: each under its heading, as the
    chunk itself is embedded, so a unit keeps the topic its passage is about."""
    head = " ".join(heading.split())
    return [f"{head}\n{u.embed_text}" if head else u.embed_text for u in split_units(text)[:MAX_UNITS]]
