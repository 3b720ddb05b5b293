"""ADGM rulebooks pack: FSRA instruments as passages, references scoped by instrument.

Documents (see build_corpus.py): ``corpus/<code>.jsonl``, a header line ``{"code", "document_id",
"passages", "title"}`` then one ``{"passage_id", "text"}`` line per passage. Parsed strictly: any
other shape rejects the document.

Chunking rule (rules_version "1"): one chunk per passage, never split; local id = the passage's
own numbering (``9.3.1B.Guidance.5.``, ``3.3.31``, ``Part 6.Chapter 1.58.(2)``, ``117)``),
percent-encoded by ``encode_local_id`` (``Part%206.Chapter%201.58.(2)``); heading
``<CODE> <passage id>``; text verbatim (it may be empty: a rule whose paragraphs are passages).

Numbers (``number_of``): a passage id becomes the number its instrument is cited by, lower case:

    3.3.31 -> 3.3.31          9.2.2.(3) -> 9.2.2(3)          9.3.1B.Guidance.5. -> 9.3.1b.guidance.5
    APP4.A4.3.6 -> a4.3.6     APP 7 -> app7                  12 (a chapter) -> 12
    FSMR/BRR/CRS (statutes): Part 6.Chapter 1.58.(2) -> 58(2), Part 4.33. -> 33, Part 12 -> part12,
                             Part 12.Chapter 3 -> part12.chapter3, Schedule 3.2.(2) -> schedule3.2(2)
    FUNDS: PART 4.9.4.2.(1) -> 9.4.2(1), PART 5.16 -> 16, PART 4 -> part4, APP 1 -> app1
    guidance notes numbered by paragraph: 117) -> 117, 166).a) -> 166(a)

Keys a chunk answers to: ``<doc_id>:<number>`` (scoped) and ``<number>`` (unscoped, for questions
that do not name the instrument); a rule or section whose text holds its own numbered or lettered
points (a line starting ``(13)``, ``(a)`` or ``a)``) also answers to ``<number>(13)``, so
"MKT Rule 4.3.1(13)" finds rule 4.3.1 when the data has no separate passage for paragraph (13);
an appendix passage answers to the provisions whose labels open its lines (FUNDS ``APP 1`` holds
``A1.3``, so "Appendix A1.3 of the Fund Rules" finds it).

Reference normalizer (normalizer_version "1"): a reference is a unit word and a number list
("Rule 4.5", "Rules 8.3.1 to 8.3.4", "Sections 3.4 and 3.6", "Chapter 11", "Part 4", "paragraph
25", "App2", "section 92(6)") or an instrument code and a number list ("GEN 3.3.31 and 3.3.32",
"MIR 2.14", "COBS Rule 17.5", "PRU Section 4.8", "FSMR Section 149"), optionally followed by the
instrument ("Chapter 11 of MKT", "section 48 of FSMR", "Part 4 of the Fund Rules", "paragraphs
47-54 of the Guidance on Mining"). Its instrument is the one it names, else the citing chunk's
own (internal); two exceptions, both from how the FSRA writes: a bare ``section <integer>`` in
an instrument that is not a statute means the FSMR (rulebooks number sections 4.5, the FSMR
numbers them 92), and "Part N" of an instrument without parts means its chapter N. Keys are always
scoped: ``<doc_id>:<number>``. Numbers keep their first parenthesised level and drop the rest
("5.1.1(b)(iii)" -> 5.1.1(b), "58(2)(b)" -> 58(2)); ranges expand ("8.3.1 to 8.3.4", "47-54",
"12.10.1(1) to 12.10.1(5)"; at most MAX_RANGE numbers); "Chapter M of Part N" of a statute is
``partN.chapterM``. A provision of an instrument outside the data ("section 225 of the Insolvency
Regulations", "Article 21 of Cabinet Decision No. (74) of 2020") becomes an ``outside:`` key no
chunk answers. Relative references ("subsection (1)", "paragraph (a)") are not emitted. A chunk
never references a key it answers to itself.

Question side (``query_references``): the same parser with no citing instrument: a number the
question qualifies ("COBS Rule 17.5", "section 58 of FSMR") maps to the scoped key, a bare one
("Rule 3.8.1") to the unscoped key, which the engine treats as ambiguous when several
instruments answer it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

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
MAX_RANGE = 60
"""Longest range expanded ("Rules 8.3.1 to 8.3.4"); a longer one keeps its two ends only."""

# ---------------------------------------------------------------------------------------------
# Instruments

STATUTES = frozenset({"fsmr", "brr", "crs", "fatca"})
"""Regulations numbered Part / Chapter / section: "section 58" is a number of the whole statute."""
WITH_PARTS = STATUTES | {"funds"}
"""Instruments whose top level is a Part; elsewhere "Part 6" means chapter 6."""

# code (as written in text) -> doc_id; then longer names. Order matters only between names that
# start alike (longest first).
CODES = {
    "AML": "aml",
    "CIB": "cib",
    "COBS": "cobs",
    "FEES": "fees",
    "FUNDS": "funds",
    "GEN": "gen",
    "FP": "fp",
    "GLO": "glo",
    "IFR": "ifr",
    "MIR": "mir",
    "MKT": "mkt",
    "PIN": "pin",
    "PRU": "pru",
    "BRR": "brr",
    "CRS": "crs",
    "FATCA": "fatca",
    "FSMR": "fsmr",
    "CMC": "cmc",
    "CONF": "conf",
    "GPM": "gpm",
}
NAMES: tuple[tuple[str, str], ...] = (
    (r"Financial\s+Services\s+and\s+Markets\s+Regulations(?:\s+2015)?", "fsmr"),
    (r"Market\s+Infrastructure\s+Rule(?:s|book)", "mir"),
    (r"Conduct\s+of\s+Business\s+(?:Rulebook|Rules|Module)", "cobs"),
    (r"General\s+(?:Rulebook|Rules|Module)", "gen"),
    (r"Fund(?:s)?\s+Rules", "funds"),
    (r"Fees\s+Rules", "fees"),
    (r"Markets?\s+Rules", "mkt"),
    (r"Islamic\s+Finance\s+Rules", "ifr"),
    (r"Captive\s+Insurance\s+Business\s+Rules", "cib"),
    (r"Code\s+of\s+Market\s+Conduct", "cmc"),
    (r"Guidance\s+and\s+Policies\s+Manual", "gpm"),
    (r"Fund\s+Passporting\s+Rules", "fp"),
    (r"(?:Prudential\s*[-\u2013]\s*)?Investment,\s+Insurance\s+Intermediation\s+and\s+Banking\s+Rules", "pru"),
    (r"Anti-Money\s+Laundering\s+and\s+Sanctions\s+Rules(?:\s+and\s+Guidance)?", "aml"),
    (r"AML\s+Rulebook", "aml"),
    (r"Guidance\s+on\s+Mining(?:\s+Reporting\s+Entities)?", "gn-mining"),
    (r"Guidance\s+on\s+Petroleum(?:\s+Reporting\s+Entities)?", "gn-petroleum"),
    (r"Guidance\s+on\s+Continuous\s+Disclosure", "gn-cd"),
    (r"Virtual\s+Assets?\s+Guidance", "gn-va"),
)
SELF = (
    r"(?:these|this|the\s+present)\s+"
    r"(?:Rules|Rulebook|Regulations|Guidance|Chapter|Code|Manual|Module|App(?:endix)?|Part)"
)
"""Names of the citing instrument itself ("Chapter 4 of these Rules", "paragraph 25 of this Guidance")."""
# Instruments outside the ADGM data: a provision of one of them is an `outside:` reference.
OUTSIDE = (
    r"(?:ADGM\s+)?Insolvency\s+Regulations(?:\s+2015)?|Companies\s+Regulations(?:\s+2020)?|the\s+CR\b"
    r"|Commercial\s+Licensing\s+Regulations(?:\s+2015)?|(?:ADGM\s+)?Founding\s+Law"
    r"|(?:UAE\s+)?Cabinet\s+(?:Decision|Resolution)(?:\s+No\.?\s*\(?\d+\)?\s+of\s+\d{4})?"
    r"|Federal\s+(?:Decree\s+by\s+)?Law\s+No\.?\s*\(?\d+\)?\s+of\s+\d{4}|Abu\s+Dhabi\s+Law\s+No\.?\s*\(?\d+\)?\s+of\s+\d{4}"
    r"|Petroleum\s+Reporting\s+Standard|Employment\s+Regulations(?:\s+2019)?|Data\s+Protection\s+Regulations(?:\s+2021)?"
    r"|Schedule\s+\d+\s+of\s+the\s+Insolvency\s+Regulations|Cabinet\s+Resolution\s+\d+\s+of\s+\d{4}"
)

OUTSIDE_MENTION = re.compile(
    r"International\s+Financial\s+Reporting\s+Standards(?:\s+\(IFRS\))?|\bIFRS\b|\bUS\s+GAAP\b"
    r"|\bFATF(?:['\u2019]?s)?\s+(?:Recommendations?(?:\s+(?:Number\s+)?\d+)?(?:\s+and\s+Interpretive\s+Notes)?"
    r"|Guidance\s+for\s+a\s+Risk-Based\s+Approach[^.;\n]{0,40}?VASPs|Interpretative\s+Note|public\s+statement"
    r"(?:\s+on\s+\d{1,2}\s+\w+\s+\d{4})?|website)"
    r"|Financial\s+Action\s+Task\s+Force(?:\s+Standards|\s+\(FATF\))?|\bRecommendation\s+\d+\b"
    r"|Basel\s+Committee(?:\s+on\s+Banking\s+Supervision)?(?:\s+\(BCBS\))?(?:\s+(?:guidelines|Standards))?"
    r"|\bBCBS\d*\b|Wolfsberg(?:\s+Group|\s+Statement[^,.;\n]{0,100})?"
    r"|International\s+Monetary\s+Fund(?:\s+\(IMF\))?|Bank\s+for\s+International\s+Settlements(?:\s+\(BIS\))?"
    r"|International\s+Organi[sz]ation\s+(?:of|for)\s+Securities\s+Commissions(?:\s+\(IOSCO\))?|\bIOSCO\b"
    r"|Islamic\s+Financial\s+Services\s+Board(?:\s+\(IFSB\))?|\bwww\.[\w.-]*\w"
    rf"|(?:the\s+)?(?:{OUTSIDE})"
)
"""Instruments, standards and bodies outside the data named without a provision ("in accordance
with the International Financial Reporting Standards", "FATF Recommendation Number 15")."""

_CODE_ALT = "|".join(sorted(CODES, key=len, reverse=True))
_INSTR = rf"(?:\b(?:{_CODE_ALT})\b|{'|'.join(n for n, _ in NAMES)})"
_NAMED = re.compile(_INSTR)
_NAME_RES = [(re.compile(rf"^(?:{pattern})$", re.I), doc) for pattern, doc in NAMES]


def instrument_doc(name: str) -> str | None:
    """doc_id of an instrument as written ("COBS", "the Fund Rules", "Market Infrastructure Rules")."""
    name = re.sub(r"\s+", " ", name.strip())
    if name in CODES:
        return CODES[name]
    for rx, doc in _NAME_RES:
        if rx.match(name):
            return doc
    return None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


# ---------------------------------------------------------------------------------------------
# Passage ids -> numbers

_PAREN_TOKEN = re.compile(r"^\((\w+)\)$")
_APP_TOKEN = re.compile(r"^APP\s*(\d+)$", re.I)


def number_of(passage_id: str, doc_id: str) -> str:
    """The number an instrument's passage is cited by (see the module docstring)."""
    pid = re.sub(r"\s*\.\s*", ".", passage_id.strip()).rstrip(".")
    if not pid:
        raise PackError(f"{doc_id}: empty passage id")
    if re.fullmatch(r"\d+\)(?:\.[a-z]\))*", pid):  # guidance paragraphs: 117)  166).a)
        head, *points = pid.split(".")
        return head[:-1] + "".join(f"({p[:-1]})" for p in points)
    tokens = pid.split(".")
    if doc_id in STATUTES and (m := re.fullmatch(r"(?:Part|PART)\s*(\d+[A-Z]?)", tokens[0])):
        rest = tokens[1:]
        chapter = None
        if rest and (c := re.fullmatch(r"Chapter\s*(\d+[A-Z]?)", rest[0], re.I)):
            chapter, rest = c.group(1), rest[1:]
        if not rest:
            return f"part{m.group(1)}" + (f".chapter{chapter}" if chapter else "").lower()
        tokens = rest
    elif doc_id in STATUTES and (m := re.fullmatch(r"Schedule\s*(\d+)", tokens[0], re.I)):
        tokens = [f"schedule{m.group(1)}", *tokens[1:]]
    elif doc_id == "funds" and (m := re.fullmatch(r"PART\s*(\d+)", tokens[0], re.I)):
        if len(tokens) == 1:
            return f"part{m.group(1)}"
        tokens = tokens[1:]
    if m := _APP_TOKEN.match(tokens[0]):
        if len(tokens) > 1 and re.fullmatch(rf"A{m.group(1)}", tokens[1], re.I):
            tokens = tokens[1:]  # APP4.A4.3.6: the appendix is already in "A4"
        else:
            tokens = [f"app{m.group(1)}", *tokens[1:]]
    out = ""
    for tok in tokens:
        tok = re.sub(r"\s+", "_", tok.strip())
        if p := _PAREN_TOKEN.match(tok):
            out += f"({p.group(1)})"
        else:
            out += ("." if out else "") + tok
    return out.lower()


_POINT_LINE = re.compile(r"^\s*(?:\((\d{1,2}|[a-z]{1,2}|[ivx]{1,5})\)|([a-z])\))[\t ]", re.M)


def contained_points(text: str) -> list[str]:
    """Points a passage holds itself: lines opening with (1), (a), (iv) or a)."""
    return list(dict.fromkeys(m.group(1) or m.group(2) for m in _POINT_LINE.finditer(text)))


_PROVISION_LINE = re.compile(r"^(A\d+(?:\.\d+)*)(?:\.\((\d+)\))?[\t ]", re.M)


def contained_provisions(text: str) -> list[str]:
    """Numbered provisions an appendix passage holds itself: lines opening with A1.3, A1.2.1.(1)."""
    return list(
        dict.fromkeys(
            m.group(1).lower() + (f"({m.group(2)})" if m.group(2) else "") for m in _PROVISION_LINE.finditer(text)
        )
    )


def chunk_keys(doc_id: str, passage_id: str, text: str) -> tuple[str, ...]:
    number = number_of(passage_id, doc_id)
    numbers = [number]
    if "(" not in number and "guidance" not in number and re.search(r"\d", number):
        numbers += [f"{number}({p})" for p in contained_points(text)]
    if number.startswith("app"):
        numbers += contained_provisions(text)
    keys = [f"{doc_id}:{n}" for n in numbers] + numbers
    return tuple(dict.fromkeys(keys))


# ---------------------------------------------------------------------------------------------
# References

_NUM = (
    r"(?:A\d+(?:\.\d+)*|\d+[A-Z]?(?:\.(?:\d+[A-Z]{0,2}|[A-Z](?=\.\d)))*)(?![\d/%])"
    r"(?:[ ]?\((?:\d{1,3}|[a-z]{1,4})\))*"
)
"""A written number: 3.3.31, 9.3.1B, A4.3.2, 138A, 15.11.A.1 (a typo for 15.11A.1), with (3)(b)..."""
_UNIT_WORDS = (
    r"(?:[Rr]ules?|RULES?|[Ss]ections?|[Ss]ubsections?|[Cc]hapters?|[Pp]arts?|PARTS?"
    r"|[Pp]aragraphs?|Appendix(?=\s+A\d)|Guidance\s+notes?\s+\d+\s+(?:of|to|in))"
)
_SEP = r"(?:\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or|to|and/or)\s+|\s*[-\u2013\u2014]\s*|\s*/\s*|[ ]{2,})"
"""List and range separators. Two spaces between two numbers are a range whose dash the data lost
("Rules 17.1  17.6", "GEN 8.8.1  8.8.14")."""
_RANGE_SEPS = ("to", "-", "\u2013", "\u2014", "")
_ITEM_UNIT = r"(?:(?:[Rr]ules?|[Ss]ections?|[Cc]hapters?|[Pp]arts?|PARTS?|[Pp]aragraphs?)\s+)"
_PAREN = r"\((?:\d{1,3}|[a-z]{1,4})\)"
_PRE_INSTR = rf"(?:{_INSTR}|\((?:{_CODE_ALT})\))"
_LIST = rf"{_NUM}(?:{_SEP}(?:(?:{_INSTR})\s+)?{_ITEM_UNIT}?(?:{_NUM}|{_PAREN}))*"
_QUAL = re.compile(
    rf"\s*,?\s+(?:of\s+of|of|in|under)\s+(?:(?P<self>{SELF})|(?:the\s+)?(?P<outside>{OUTSIDE})"
    rf"|(?:the\s+)?(?P<post>{_INSTR})(?:\s+\((?:{_CODE_ALT})\))?"
    rf"|(?P<ofpart>Part\s+\d+[A-Z]?)|(?P<ofchapter>[Cc]hapter\s+\d+)|(?:the\s+)?(?P<schedule>Schedule)(?:\s+\d+)?\b"
    rf"|(?:App(?:endix)?|APP)\s*\d+\b)"
)
_AHEAD = re.compile(rf"[^.;\n]{{0,80}}?\bof\s+(?:the\s+)?(?:(?P<outside>{OUTSIDE})|(?P<post>{_INSTR}))")
"""After "of Part 12" / "of Chapter 3" / "of Schedule 1": the instrument named further on."""

_REFERENCE = re.compile(
    rf"(?P<appx>(?:(?P<appinstr>(?<![\w-]){_INSTR})\s+)?(?<![\w.])(?:App(?:endix)?|APP)\s*(?P<appnum>\d+)\b(?!\.\d))"
    rf"|(?P<pre>(?<![\w-]){_PRE_INSTR})(?:\s+\((?:{_CODE_ALT})\))?\s*,?\s+(?:(?P<punit>{_UNIT_WORDS})\s*)?"
    rf"(?P<plist>{_LIST})"
    rf"|(?<![\w.])(?P<unit>{_UNIT_WORDS})\s*(?:(?P<uinstr>{_CODE_ALT})\s+)?(?P<list>{_LIST})"
    rf"|(?<![\w.$\u00a3/-])"
    rf"(?P<bare>(?:A\d+\.\d+(?:\.\d+)*|\d+\.\d+\.\d+[A-Z]?(?:\.\d+)*)(?:[ ]?{_PAREN})*)(?![\w%]|\.\d)"
    rf"|(?P<article>Articles?\s+\d+(?:\(\d+\))*\s+of\s+(?:the\s+)?(?P<aname>{OUTSIDE}|[A-Z][\w'()., -]{{3,120}}?)"
    rf"(?=[,.;:)]|\s+(?:and|or|which|that|to|in|on)\b|$))"
)
_ITEM = re.compile(
    rf"(?P<sep>{_SEP})?(?:(?P<instr>{_INSTR})\s+)?(?P<unit>{_ITEM_UNIT})?(?:(?P<num>{_NUM})|(?P<paren>{_PAREN}))"
)
_NUM_PARTS = re.compile(r"^(?P<base>A?\d+[A-Z]?(?:\.\d+[A-Z]{0,2})*)[ ]?(?P<subs>(?:\(\w+\))*)$")
_HEADING = re.compile(r"(?:PART|Part)\s+\d+\s*[-\u2013\u2014]")
OWN_SECTIONS = frozenset({"gn-vcfm", "gn-esg", "gn-reglab", "gn-dso", "gn-pfp", "sg-sf", "gn-climate"})
"""Guidance numbered by sections (3, 3.4): "section 3" there is their own, not the FSMR's."""


def _canonical(num: str) -> tuple[str, list[str]]:
    """(base, sub-levels) of a written number: '9.2.2(3)(b)' -> ('9.2.2', ['3', 'b'])."""
    num = re.sub(r"\.([A-Z])(?=\.\d)", r"\1", num.strip())  # 15.11.A.1 -> 15.11A.1
    m = _NUM_PARTS.match(num.replace(" (", "("))
    if not m:
        return num.lower(), []
    return m.group("base").lower(), re.findall(r"\((\w+)\)", m.group("subs").lower())


def _written(base: str, subs: list[str]) -> str:
    return base + (f"({subs[0]})" if subs else "")


def _expand(first: tuple[str, list[str]], last: tuple[str, list[str]]) -> list[str] | None:
    """Numbers strictly between first and last when they differ only in their last component or
    their first sub-level ("8.3.1 to 8.3.4", "47-54", "12.10.1(1) to 12.10.1(5)")."""
    (b1, s1), (b2, s2) = first, last
    if s1 or s2:
        if b1 == b2 and s1 and s2 and s1[0].isdigit() and s2[0].isdigit():
            lo, hi = int(s1[0]), int(s2[0])
            if lo < hi <= lo + MAX_RANGE:
                return [f"{b1}({n})" for n in range(lo + 1, hi)]
        return None
    p1, p2 = b1.split("."), b2.split(".")
    if len(p1) != len(p2) or p1[:-1] != p2[:-1]:
        return None
    m1, m2 = re.fullmatch(r"(a?)(\d+)", p1[-1]), re.fullmatch(r"(a?)(\d+)", p2[-1])
    if not m1 or not m2 or m1.group(1) != m2.group(1):
        return None
    lo, hi = int(m1.group(2)), int(m2.group(2))
    if not lo < hi <= lo + MAX_RANGE:
        return None
    prefix = ".".join(p1[:-1]) + ("." if len(p1) > 1 else "") + m1.group(1)
    return [f"{prefix}{n}" for n in range(lo + 1, hi)]


def _unit_type(unit: str) -> str:
    unit = unit.lower()
    if unit.startswith("subsection"):
        return "section"
    for name in ("rule", "section", "chapter", "part", "paragraph", "appendix"):
        if unit.startswith(name):
            return "rule" if name == "appendix" else name
    return "rule"


Found = tuple[str, str, str, int, int]  # (ref_type, key, raw, start, end)


def _outside(raw: str, name: str, start: int, end: int, numbers: list[str]) -> list[Found]:
    scope = _slug(re.sub(r"^the\s+", "", name, flags=re.I))
    if not numbers:
        return [("outside", f"outside:{scope}", raw, start, end)]
    return [("outside", f"outside:{scope}:{n}", raw, start, end) for n in numbers]


def _number_in(
    target: str | None,
    unit: str,
    base: str,
    subs: list[str],
    own: str | None,
    of_part: str | None,
    of_chapter: str | None,
    schedule: bool,
) -> str | None:
    """The number a cited unit answers to in its target instrument (None: no single passage)."""
    kind = _unit_type(unit) if unit else "rule"
    if kind == "chapter" and (target in STATUTES or (target is None and of_part)):
        if of_part:
            return f"part{re.sub(r'[^0-9A-Za-z]', '', of_part[4:]).lower()}.chapter{base}"
        return base if target is None else None  # a statute's "Chapter 3" needs its Part
    if kind == "part":
        if of_chapter and target not in WITH_PARTS:
            return re.sub(r"\D", "", of_chapter)  # "Part 3 of Chapter 3 of PRU": that chapter
        if target is None or target in WITH_PARTS:
            return f"part{base}"  # also "Part 2 of the Schedule" (BRR), "Part 4 of Schedule 1 of FSMR"
        return base  # "Part 6 of MKT", "Part 3 (Calculating Capital Requirements)": chapter 6, 3
    return _written(base, subs)


def parse_references(text: str, own: str | None, implied: str | None = None) -> list[Found]:
    """Every reference in ``text``; ``own`` is the citing instrument (None: a question).

    ``implied`` (questions only) scopes numbers the question does not qualify to the one
    instrument it names elsewhere ("In the Market Rules, what does Rule 4.3.1 require?")."""
    scan = text.replace("\u200e", " ")  # left-to-right marks inside numbers ("Rule \u200e10.3.2"); same offsets
    found: list[Found] = []

    def scoped(doc: str | None, number: str) -> str:
        return f"{doc}:{number}" if doc else number

    pos = 0
    while m := _REFERENCE.search(scan, pos):
        start, end = m.start(), m.end()
        q = (
            _QUAL.match(scan, end)
            if (m.group("plist") or m.group("list") or m.group("bare") or (m.group("appx") and not m.group("appinstr")))
            else None
        )
        if q:
            end = q.end()
        pos = max(end, start + 1)
        raw = text[start:end]

        def qual(name: str, q: re.Match[str] | None = q) -> str | None:  # q bound per iteration
            return q.group(name) if q else None

        if _HEADING.match(scan, start) and (start == 0 or scan[start - 1] == "\n"):
            continue  # "PART 3 \u2013 Calculating Capital Requirements": a title, not a reference
        if m.group("appx"):
            doc = instrument_doc(m.group("appinstr") or qual("post") or "") or (own or implied)
            found.append(("appendix", scoped(doc, f"app{m.group('appnum')}"), raw, start, end))
            continue
        if m.group("article"):
            if instrument_doc(m.group("aname")) is None:
                found += _outside(raw, m.group("aname"), start, end, [])
            continue
        post = qual("post")
        post_doc = instrument_doc(post) if post else None
        outside = qual("outside")
        of_part, of_chapter, schedule = qual("ofpart"), qual("ofchapter"), bool(qual("schedule"))
        if (of_part or of_chapter or schedule) and not post_doc:
            ahead = _AHEAD.match(scan, end)
            if ahead and ahead.group("outside"):
                outside = ahead.group("outside")
            elif ahead:
                post_doc = instrument_doc(ahead.group("post"))
        if m.group("bare"):
            if not scan[scan.rfind("\n", 0, start) + 1 : start].strip():
                continue  # "A1.2.1.(1)<tab>A Fund Manager ...": a provision's own label, not a reference
            listing, head_unit, prefix_doc = m.group("bare"), "", None
        else:
            prefix = m.group("pre") or m.group("uinstr")
            prefix_doc = instrument_doc(prefix.strip("()")) if prefix else None
            listing = m.group("plist") or m.group("list")
            head_unit = re.sub(r"\s+\d+\s+(?:of|to|in)$", "", m.group("unit") or m.group("punit") or "")
        # items: (base, subs, unit, explicit instrument, range end)
        items: list[tuple[str, list[str], str, str | None, bool]] = []
        doc, unit = prefix_doc, head_unit
        for it in _ITEM.finditer(listing):
            if it.start() == it.end():
                continue
            if it.group("unit") and _unit_type(it.group("unit")) != _unit_type(unit or "rule"):
                doc = None  # "COBS Rules 17.1 to 17.6, section 58 of FSMR": a new unit, a new instrument
            if it.group("unit"):
                unit = it.group("unit").strip()
            if it.group("instr"):
                doc = instrument_doc(it.group("instr")) or doc
            is_range = (it.group("sep") or " ").strip() in _RANGE_SEPS and bool(it.group("sep"))
            if it.group("paren"):  # "Rule 9.1.1(3) or (4)", "section 214(1)-(2)": a sibling point
                if not items or not items[-1][1]:
                    continue
                base, subs = items[-1][0], [*items[-1][1][:-1], it.group("paren")[1:-1]]
            else:
                base, subs = _canonical(it.group("num"))
            items.append((base, subs, unit, doc, is_range))
        if not items:
            continue
        if outside:
            found += _outside(raw, outside, start, end, list(dict.fromkeys(_written(b, s) for b, s, *_ in items)))
            continue
        fallback = post_doc or own or implied
        for i, (base, subs, item_unit, item_doc, is_range_end) in enumerate(items):
            target = item_doc if item_doc is not None else fallback
            kind = _unit_type(item_unit) if item_unit else "rule"
            if (
                kind == "section"
                and item_doc is None
                and not post_doc
                and own is not None
                and target == own
                and own not in STATUTES | OWN_SECTIONS
                and not qual("self")
                and re.fullmatch(r"\d+[a-z]?", base)
            ):
                target = "fsmr"  # "section 92(6)" in the CMC, GPM, CONF, a rulebook: the FSMR's section
            number = _number_in(target, item_unit, base, subs, own, of_part, of_chapter, schedule)
            if number is None:
                continue
            numbers = [number]
            if is_range_end and i > 0:
                prev = items[i - 1]
                expanded = (
                    _expand((prev[0], prev[1]), (base, subs))
                    if kind == (_unit_type(prev[2]) if prev[2] else "rule")
                    else None
                )
                if expanded is not None:
                    numbers = [
                        (
                            _number_in(target, item_unit, n, [], own, of_part, of_chapter, schedule)
                            if "(" not in n
                            else n
                        )
                        or n
                        for n in expanded
                    ] + [number]
            for n in numbers:
                found.append((kind, scoped(target, n), raw, start, end))
    spans = [(f[3], f[4]) for f in found]
    for m in OUTSIDE_MENTION.finditer(scan):
        if not any(a < m.end() and m.start() < b for a, b in spans):
            found += _outside(text[m.start() : m.end()], m.group(0), m.start(), m.end(), [])
    found.sort(key=lambda f: (f[3], f[4]))
    out: list[Found] = []
    seen: set[tuple[str, int]] = set()
    for ref in found:
        if (ref[1], ref[3]) in seen:
            continue
        seen.add((ref[1], ref[3]))
        out.append(ref)
    return out


# ---------------------------------------------------------------------------------------------
# Documents


def parse_document(doc_id: str, text: str) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """(header, [(passage id, text)]) of a corpus file; strict: anything else is a PackError."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise PackError(f"{doc_id}: empty document")
    records = []
    for lineno, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise PackError(f"{doc_id}:{lineno}: not a JSON object: {exc.msg}") from None
        if not isinstance(records[-1], dict):
            raise PackError(f"{doc_id}:{lineno}: not a JSON object")
    header, *rows = records
    if set(header) != {"code", "document_id", "passages", "title"}:
        raise PackError(f"{doc_id}:1: header must have exactly code, document_id, passages, title")
    if not isinstance(header["code"], str) or header["code"].lower() != doc_id:
        raise PackError(f"{doc_id}:1: code {header['code']!r} does not name this document")
    if not isinstance(header["title"], str) or not header["title"].strip():
        raise PackError(f"{doc_id}:1: title must be a non-empty string")
    if header["passages"] != len(rows):
        raise PackError(f"{doc_id}:1: header says {header['passages']} passages, the file has {len(rows)}")
    passages: list[tuple[str, str]] = []
    seen: set[str] = set()
    for lineno, row in enumerate(rows, 2):
        if (
            set(row) != {"passage_id", "text"}
            or not isinstance(row["passage_id"], str)
            or not isinstance(row["text"], str)
        ):
            raise PackError(f"{doc_id}:{lineno}: a passage must have exactly a string passage_id and text")
        pid = row["passage_id"]
        if not pid.strip() or pid != pid.strip():
            raise PackError(f"{doc_id}:{lineno}: passage id {pid!r} is empty or padded")
        if pid in seen:
            raise PackError(f"{doc_id}:{lineno}: passage {pid!r} appears twice")
        seen.add(pid)
        passages.append((pid, row["text"]))
    if not passages:
        raise PackError(f"{doc_id}: no passages")
    return header, passages


# ---------------------------------------------------------------------------------------------
# The pack


class AdgmRulebooksPack(DomainPack):
    """FSRA instruments as passages; references scoped by instrument (see the module docstring)."""

    def describe_document(self, doc_id: str, text: str) -> tuple[str, str, str]:
        first = text.split("\n", 1)[0]
        try:
            header = json.loads(first)
            title = f"{header['code']} \u2014 {header['title']}"
        except (json.JSONDecodeError, KeyError, TypeError):
            title = doc_id  # chunk() reports what is wrong with the file
        return title[:200], self.manifest.default_collection, self.manifest.languages[0]

    def chunk(self, doc: SourceDocument) -> list[ChunkRecord]:
        header, passages = parse_document(doc.doc_id, doc.text)
        limit = self.manifest.max_chunk_chars
        chunks: list[ChunkRecord] = []
        locals_seen: dict[str, str] = {}
        for pid, text in passages:
            if len(text) > limit:
                raise PackError(
                    f"{doc.doc_id}: passage {pid!r} has {len(text)} characters, more than "
                    f"max_chunk_chars {limit} (passages are never split)"
                )
            chunk = make_chunk(
                doc, len(chunks), pid, f"{header['code']} {pid}", text, chunk_keys(doc.doc_id, pid, text)
            )
            local = chunk.anchor.split("#", 1)[1]
            if local in locals_seen:
                raise PackError(f"{doc.doc_id}: passages {locals_seen[local]!r} and {pid!r} share local id {local!r}")
            locals_seen[local] = pid
            chunks.append(chunk)
        return chunks

    def _records(self, chunk: ChunkRecord, own: str | None, implied: str | None = None) -> list[ReferenceRecord]:
        allowed = set(self.manifest.reference_types)
        mine = set(chunk.keys)
        return [
            ReferenceRecord(
                source_chunk_id=chunk.chunk_id, ref_type=ref_type, raw=raw, normalized=key, start=start, end=end
            )
            for ref_type, key, raw, start, end in parse_references(chunk.text, own, implied)
            if ref_type in allowed and key not in mine
        ]

    def extract_references(self, chunk: ChunkRecord) -> list[ReferenceRecord]:
        return self._records(chunk, chunk.doc_id or None)

    def query_references(self, text: str) -> list[ReferenceRecord]:
        named = self.documents_named(text)
        return self._records(self.question_chunk(text), None, named[0] if len(named) == 1 else None)

    def documents_named(self, text: str) -> list[str]:
        """Instruments the question names by code or title ("under COBS", "the Fund Rules")."""
        return sorted({doc for m in _NAMED.finditer(text) if (doc := instrument_doc(m.group(0)))})


def build_pack(entry: PackEntry, manifest: PackManifest, root: Path) -> AdgmRulebooksPack:
    require_versions(entry, manifest, rules=SUPPORTED_RULES_VERSIONS, normalizers=SUPPORTED_NORMALIZER_VERSIONS)
    return AdgmRulebooksPack(entry, manifest, root)
