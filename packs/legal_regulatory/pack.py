"""Legal/regulatory pack: the GDPR as Markdown (see build_corpus.py for the document shape).

Chunking rule (rules_version "1"): one chunk per article paragraph with its points and any
unnumbered subparagraphs that follow it, one chunk per article that has no numbered paragraphs,
one chunk per recital. A chunk longer than manifest.max_chunk_chars is split at line and then
sentence boundaries; the parts keep the paragraph's keys, the first part keeps the paragraph's
local id (so golden anchors survive a change of max_chunk_chars) and later parts add ``-2``, ``-3``.

Reference normalizer (normalizer_version "1"), regex based and deterministic:
    Article 23(1), point (a) of Article 6(1), Article 6(1)(a)  -> article:23(1), article:6(1)
    Articles 13 and 14, Articles 15 to 22, Article 83(4), (5)  -> one key per article/paragraph
    paragraph 2 / paragraphs 1 and 2 (of this Article)          -> article:<current article>(2)
    Chapter III                                                 -> chapter:3
    Recital 12                                                  -> recital:12
    Directive 95/46/EC, Directive (EU) 2016/680                 -> directive:95/46/ec, directive:2016/680/eu
    Regulation (EC) No 45/2001                                  -> regulation:45/2001/ec
Articles of other instruments ("Article 16 TFEU", "Article 8(1) of the Charter", "Article 2 of
Directive 95/46/EC") are not GDPR articles and are not emitted as article keys; the instrument
itself is. A chunk never references a key it answers to itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rag_engine.packs import (
    ChunkRecord,
    DomainPack,
    PackEntry,
    PackError,
    PackManifest,
    ReferenceRecord,
    SourceDocument,
    make_chunk,
    require_versions,
)

SUPPORTED_RULES_VERSIONS = frozenset({"1"})
SUPPORTED_NORMALIZER_VERSIONS = frozenset({"1"})
DASH = "\u2014"

# ---------------------------------------------------------------------------------------------
# Document structure

_CHAPTER_H = re.compile(rf"^# Chapter ([IVXLC]+) {DASH} (.+)$")
_RECITALS_H = re.compile(r"^# Recitals\b")
_SECTION_H = re.compile(rf"^## Section (\d+) {DASH} (.+)$")
_ARTICLE_H = re.compile(rf"^## Article (\d+) {DASH} (.+)$")
_RECITAL_H = re.compile(r"^## Recital (\d+)\s*$")
_NUMBERED = re.compile(r"^(\d+)\.\s+\S")

_ROMAN = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100}


def roman_to_int(numeral: str) -> int:
    total = 0
    for i, ch in enumerate(numeral):
        value = _ROMAN[ch]
        total += -value if i + 1 < len(numeral) and _ROMAN[numeral[i + 1]] > value else value
    return total


@dataclass
class _Article:
    number: str
    title: str
    lead: list[str] = field(default_factory=list)
    """Lines before the first numbered paragraph (or all lines of an unnumbered article)."""
    paragraphs: list[tuple[str, list[str]]] = field(default_factory=list)


@dataclass
class _Recital:
    number: str
    lines: list[str] = field(default_factory=list)


def _parse(doc: SourceDocument) -> tuple[int | None, list[_Article | _Recital]]:
    """Chapter number (None for recital files) and the articles or recitals, in order."""
    chapter: int | None = None
    kind: str | None = None
    units: list[_Article | _Recital] = []
    for lineno, raw in enumerate(doc.text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("# "):
            if kind is not None:
                raise PackError(f"{doc.doc_id}:{lineno}: second top-level heading")
            if m := _CHAPTER_H.match(line):
                kind, chapter = "chapter", roman_to_int(m.group(1))
            elif _RECITALS_H.match(line):
                kind = "recitals"
            else:
                raise PackError(
                    f"{doc.doc_id}:{lineno}: expected '# Chapter <roman> {DASH} ...' "
                    f"or '# Recitals ...', got {line[:60]!r}"
                )
            continue
        if kind is None:
            raise PackError(f"{doc.doc_id}:{lineno}: text before the document heading")
        if line.startswith("## "):
            if kind == "chapter" and (m := _ARTICLE_H.match(line)):
                units.append(_Article(m.group(1), m.group(2).strip()))
            elif kind == "chapter" and _SECTION_H.match(line):
                pass  # sections group articles; they carry no text of their own
            elif kind == "recitals" and (m := _RECITAL_H.match(line)):
                units.append(_Recital(m.group(1)))
            else:
                raise PackError(f"{doc.doc_id}:{lineno}: unexpected heading {line[:60]!r}")
            continue
        if line.startswith("#"):
            raise PackError(f"{doc.doc_id}:{lineno}: unexpected heading {line[:60]!r}")
        if not units:
            raise PackError(f"{doc.doc_id}:{lineno}: text outside any article or recital")
        unit = units[-1]
        if isinstance(unit, _Recital):
            unit.lines.append(line)
        elif m := _NUMBERED.match(line):
            unit.paragraphs.append((m.group(1), [line]))
        elif unit.paragraphs:
            unit.paragraphs[-1][1].append(line)  # points and following subparagraphs
        else:
            unit.lead.append(line)
    if kind is None or not units:
        raise PackError(f"{doc.doc_id}: no articles or recitals found")
    for unit in units:
        empty = not unit.lines if isinstance(unit, _Recital) else not (unit.lead or unit.paragraphs)
        if empty:
            label = "recital" if isinstance(unit, _Recital) else "article"
            raise PackError(f"{doc.doc_id}: {label} {unit.number} has no text")
    return chapter, units


# ---------------------------------------------------------------------------------------------
# Splitting over-long chunks

_SENTENCE_END = re.compile(r"(?<=[a-z0-9)\u2019\u201d][.!?])\s+(?=[A-Z\u2018\u201c(])")
_CLAUSE_END = re.compile(r"(?<=;)\s+")


def _pieces_of(line: str, limit: int) -> list[str]:
    """A line as sentences (then clauses, then words) each at most `limit` characters."""
    if len(line) <= limit:
        return [line]
    out: list[str] = []
    for sentence in _SENTENCE_END.split(line):
        if len(sentence) <= limit:
            out.append(sentence)
            continue
        for clause in _CLAUSE_END.split(sentence):
            while len(clause) > limit:
                cut = clause.rfind(" ", 0, limit)
                cut = cut if cut > 0 else limit
                out.append(clause[:cut])
                clause = clause[cut:].lstrip()
            if clause:
                out.append(clause)
    return out


def split_text(lines: list[str], limit: int) -> list[str]:
    """Pack lines into parts of at most `limit` characters, breaking only between lines or
    sentences unless a single sentence is longer than the limit."""
    whole = "\n".join(lines)
    if len(whole) <= limit:
        return [whole]
    pieces: list[tuple[str, str]] = []
    for line in lines:
        for i, piece in enumerate(_pieces_of(line, limit)):
            pieces.append(("\n" if i == 0 else " ", piece))
    parts: list[str] = []
    current = ""
    for sep, piece in pieces:
        if current and len(current) + len(sep) + len(piece) > limit:
            parts.append(current)
            current = piece
        else:
            current = f"{current}{sep}{piece}" if current else piece
    if current:
        parts.append(current)
    return parts


# ---------------------------------------------------------------------------------------------
# References

_SEP = r"(?:\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|to)\s+)"
_PT = r"\([a-z]{1,4}\)"
_PARA = r"\(\d{1,2}\)"
_ANUM = r"\d{1,3}(?![\d/])"
_ART_ITEM = rf"{_ANUM}(?:{_PARA})?(?:{_PT})*"
_CONT_ITEM = rf"(?:(?:Articles?\s+)?{_ART_ITEM}|{_PARA}(?:{_PT})*|{_PT})"
_POINT_PREFIX = rf"(?:[Pp]oints?\s+{_PT}(?:{_SEP}{_PT})*\s+of\s+)"
_SUBPARA_PREFIX = r"(?:the\s+(?:first|second|third|fourth|fifth|sixth|last)\s+subparagraph\s+of\s+)"
_PNUM = r"\d{1,2}(?![\d/])"

_REFERENCE = re.compile(
    rf"(?P<instrument>(?:(?:Council|Commission)\s+)?(?P<itype>Directive|Regulation)\s+"
    rf"(?:\((?P<ifam>[A-Z][A-Za-z]*(?:,\s*[A-Z][A-Za-z]*)*)\)\s+)?(?:No\s+)?"
    rf"(?P<inum>\d{{2,4}}/\d{{1,4}})(?:/(?P<isuf>[A-Z][A-Za-z]*))?)"
    rf"|(?P<article>{_POINT_PREFIX}?{_SUBPARA_PREFIX}?"
    rf"(?:[Pp]aragraphs?\s+(?P<qpara>{_PNUM}(?:{_SEP}{_PNUM})*)\s+of\s+)?"
    rf"Articles?\s+(?P<aitems>{_ART_ITEM}(?:{_SEP}{_CONT_ITEM})*))"
    rf"|(?P<relative>{_POINT_PREFIX}?{_SUBPARA_PREFIX}?"
    rf"[Pp]aragraphs?\s+(?P<ritems>{_PNUM}(?:{_SEP}{_PNUM})*)(?:\s+of\s+this\s+Article)?)"
    rf"|(?P<chapter>Chapters?\s+(?P<citems>[IVXL]+\b(?:{_SEP}[IVXL]+\b)*))"
    rf"|(?P<recital>[Rr]ecitals?\s+(?P<recitems>\(?\d{{1,3}}\)?(?:{_SEP}\(?\d{{1,3}}\)?)*))"
)

# What follows an article citation when it belongs to another instrument.
_EXTERNAL = re.compile(
    r"\s*,?\s*(?:TFEU|TEU|thereof\b"
    r"|of\s+(?:the\s+)?(?:Charter|Treaty|Treaties|TFEU|TEU|Annex|Protocol|Statute|Convention|Title)\b"
    r"|of\s+(?:that|the\s+said)\s+(?:Directive|Regulation|Decision|Recommendation)\b"
    r"|of\s+(?:Council\s+|Commission\s+)?(?:Directive|Regulation|Decision|Recommendation)\b"
    r"(?!\s+\(EU\)\s+2016/679))"
)
_ITEM = re.compile(
    r"(?P<sep>\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|to)\s+)?"
    r"(?:(?:Articles?\s+)?(?P<art>\d+)(?:\((?P<para>\d+)\))?|\((?P<bpara>\d+)\)|\((?P<pt>[a-z]+)\))"
    r"(?:\([a-z]+\))*"
)
_MAX_RANGE = 40


def _expand(values: list[tuple[int, bool]]) -> list[int]:
    """Numbers with a flag 'preceded by "to"': ranges become every number in between."""
    out: list[int] = []
    for value, is_range_end in values:
        if is_range_end and out and out[-1] < value <= out[-1] + _MAX_RANGE:
            out.extend(range(out[-1] + 1, value + 1))
        else:
            out.append(value)
    return list(dict.fromkeys(out))


def _number_list(items: str) -> list[int]:
    values = []
    for m in re.finditer(r"(\s+to\s+)?\(?(\d+)\)?", items):
        values.append((int(m.group(2)), bool(m.group(1))))
    return _expand(values)


def _article_keys(items: str, qualifying_paragraphs: str | None) -> list[str]:
    """Keys of 'Articles 13 and 14', 'Article 83(4), (5) and (6)', 'Article 6(1)(e) or (f)'."""
    cites: list[tuple[int, int | None, bool]] = []  # (article, paragraph, range-end)
    for m in _ITEM.finditer(items):
        is_to = bool(m.group("sep") and m.group("sep").strip() == "to")
        if m.group("art"):
            para = int(m.group("para")) if m.group("para") else None
            cites.append((int(m.group("art")), para, is_to))
        elif m.group("bpara") and cites:
            cites.append((cites[-1][0], int(m.group("bpara")), is_to))
        # a bare point "(f)" names a point of the previous citation: same key, nothing to add
    keys: list[str] = []
    for i, (art, para, is_to) in enumerate(cites):
        prev = cites[i - 1] if i else None
        if is_to and prev and para is None and prev[1] is None and prev[0] < art <= prev[0] + _MAX_RANGE:
            keys += [f"article:{a}" for a in range(prev[0] + 1, art + 1)]
        elif (
            is_to
            and prev
            and para is not None
            and prev[0] == art
            and prev[1] is not None
            and prev[1] < para <= prev[1] + _MAX_RANGE
        ):
            keys += [f"article:{art}({p})" for p in range(prev[1] + 1, para + 1)]
        elif para is not None:
            keys.append(f"article:{art}({para})")
        elif qualifying_paragraphs and i == 0:
            keys += [f"article:{art}({p})" for p in _number_list(qualifying_paragraphs)]
        else:
            keys.append(f"article:{art}")
    return list(dict.fromkeys(keys))


def _instrument_key(m: re.Match[str]) -> str:
    family = m.group("isuf") or m.group("ifam") or ""
    family = re.sub(r"\s*,\s*", "-", family.strip()).lower()
    return f"{m.group('itype').lower()}:{m.group('inum')}" + (f"/{family}" if family else "")


_CURRENT_ARTICLE = re.compile(r"^article:(\d+)")


def extract_references_v1(chunk: ChunkRecord) -> list[tuple[str, str, str, int, int]]:
    """(ref_type, normalized, raw, start, end) for every reference in the chunk text."""
    current = next((m.group(1) for k in chunk.keys if (m := _CURRENT_ARTICLE.match(k))), None)
    text = chunk.text
    found: list[tuple[str, str, str, int, int]] = []
    for m in _REFERENCE.finditer(text):
        start, end, raw = m.start(), m.end(), m.group(0)
        if m.group("instrument"):
            found.append((m.group("itype").lower(), _instrument_key(m), raw, start, end))
        elif m.group("article"):
            if _EXTERNAL.match(text, end):
                continue
            for key in _article_keys(m.group("aitems"), m.group("qpara")):
                found.append(("article", key, raw, start, end))
        elif m.group("relative"):
            if current is None or _EXTERNAL.match(text, end):
                continue
            for p in _number_list(m.group("ritems")):
                found.append(("article", f"article:{current}({p})", raw, start, end))
        elif m.group("chapter"):
            if _EXTERNAL.match(text, end):
                continue
            for numeral in re.findall(r"[IVXL]+", m.group("citems")):
                found.append(("chapter", f"chapter:{roman_to_int(numeral)}", raw, start, end))
        elif m.group("recital"):
            for n in _number_list(m.group("recitems")):
                found.append(("recital", f"recital:{n}", raw, start, end))
    own = set(chunk.keys)
    seen: set[tuple[str, int]] = set()
    out = []
    for ref in found:
        if ref[1] in own or (ref[1], ref[3]) in seen:
            continue
        seen.add((ref[1], ref[3]))
        out.append(ref)
    return out


_NORMALIZERS = {"1": extract_references_v1}


# ---------------------------------------------------------------------------------------------
# The pack


class LegalRegulatoryPack(DomainPack):
    """GDPR articles and recitals; see the module docstring for the rules."""

    def chunk(self, doc: SourceDocument) -> list[ChunkRecord]:
        chapter, units = _parse(doc)
        limit = self.manifest.max_chunk_chars
        chunks: list[ChunkRecord] = []

        def emit(local: str, heading: str, lines: list[str], keys: list[str]) -> None:
            parts = split_text(lines, limit)
            for i, text in enumerate(parts, 1):
                chunks.append(
                    make_chunk(
                        doc,
                        len(chunks),
                        local if i == 1 else f"{local}-{i}",
                        heading if len(parts) == 1 else f"{heading} (part {i} of {len(parts)})",
                        text,
                        tuple(dict.fromkeys(keys)),
                    )
                )

        for unit in units:
            extra = [f"chapter:{chapter}"] if chapter is not None and not chunks else []
            if isinstance(unit, _Recital):
                emit(f"rec{unit.number}", f"Recital {unit.number}", unit.lines, [f"recital:{unit.number}"])
            elif not unit.paragraphs:
                emit(
                    f"art{unit.number}",
                    f"Article {unit.number} {DASH} {unit.title}",
                    unit.lead,
                    [f"article:{unit.number}", *extra],
                )
            else:
                for i, (para, lines) in enumerate(unit.paragraphs):
                    body = unit.lead + lines if i == 0 else lines
                    keys = [f"article:{unit.number}({para})"]
                    if i == 0:
                        keys += [f"article:{unit.number}", *extra]
                    emit(f"art{unit.number}-p{para}", f"Article {unit.number}({para}) {DASH} {unit.title}", body, keys)
        return chunks

    def extract_references(self, chunk: ChunkRecord) -> list[ReferenceRecord]:
        allowed = set(self.manifest.reference_types)
        extract = _NORMALIZERS[self.manifest.normalizer_version]
        return [
            ReferenceRecord(
                source_chunk_id=chunk.chunk_id, ref_type=ref_type, raw=raw, normalized=normalized, start=start, end=end
            )
            for ref_type, normalized, raw, start, end in extract(chunk)
            if ref_type in allowed
        ]


def build_pack(entry: PackEntry, manifest: PackManifest, root: Path) -> LegalRegulatoryPack:
    require_versions(entry, manifest, rules=SUPPORTED_RULES_VERSIONS, normalizers=SUPPORTED_NORMALIZER_VERSIONS)
    return LegalRegulatoryPack(entry, manifest, root)
