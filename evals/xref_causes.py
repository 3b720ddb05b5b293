"""Why a gold pair was missed and why a resolved pair is not in the gold (the xref eval's causes).

Pack-agnostic on purpose: these helpers only read a gold reference text and the keys the pack
produced, so they decide which predictions the gold can judge without knowing any pack's rules.
"""

from __future__ import annotations

import re
from typing import Any

from evals.xref_resolve import OUTSIDE_TYPE, Resolution

MISS_CAUSES = {
    "self_reference": "the gold target is the citing passage itself; the engine never links a chunk to itself",
    "source_not_in_corpus": "the citing passage is not a chunk of the corpus",
    "target_not_in_corpus": "the gold target passage is not a chunk of the corpus",
    "reference_text_not_in_passage": "the gold reference text does not occur in the citing passage",
    "no_reference_extracted": "no extracted reference overlaps the gold reference text",
    "gold_target_not_named": "the gold target's number is not the one its reference text names "
    "(e.g. 'Rule 4.10' linked to 4.1: a gold error)",
    "outside_instrument": "the reference was read as a provision of an instrument outside the data",
    "wrong_instrument": "the right number was scoped to another instrument",
    "key_not_answered": "the reference's key is answered by no chunk",
    "resolved_elsewhere": "the reference resolved, but to other passages (another number or granularity)",
}
EXTRA_CAUSES = {
    "resolved_to_several": "the key is answered by several passages and the gold names one of them",
    "other_target_of_gold_reference": (
        "the citing passage has a gold link from the same reference text to another passage"
    ),
    "not_a_gold_reference": "the citing passage has no gold link from this reference text",
}


def spans(text: str, needle: str) -> list[tuple[int, int]]:
    """Where ``needle`` occurs in ``text``; a number never matches inside a longer one ('4.1' is
    not in 'Rule 4.10'), so a gold reference text the passage does not hold is reported as such."""
    needle = needle.strip()
    if not needle:
        return []
    head = r"(?<![\d.])" if needle[0].isdigit() else ""
    tail = r"(?![\d]|\.\d)" if needle[-1].isdigit() else ""
    return [(m.start(), m.end()) for m in re.finditer(head + re.escape(needle) + tail, text)]


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _number(key: str) -> str:
    return key.split(":", 1)[1] if ":" in key else key


_APPX_WORD = re.compile(r"\b(?:App(?:endix)?|APP)\s*(\d+)")
_REF_NUMBER = re.compile(r"\bA?\d+(?:\.\d+[A-Z]?)*")
_REF_RANGE = re.compile(r"\b(A?(?:\d+\.)*)(\d+)\s*(?:to|-|\u2013|\u2014)\s*\1(\d+)\b")


def named_numbers(reference_text: str) -> set[str]:
    """Numbers a gold reference text names, lower case, ranges expanded ("17.1 to 17.6", "47-54")."""
    text = _APPX_WORD.sub(r" \1 ", reference_text)
    out = {n.lower() for n in _REF_NUMBER.findall(text)}
    for m in _REF_RANGE.finditer(text):
        lo, hi = int(m.group(2)), int(m.group(3))
        if lo < hi <= lo + 100:
            out |= {f"{m.group(1)}{n}".lower() for n in range(lo, hi + 1)}
    return out


def plain_number(key: str) -> str:
    """A key's number without instrument, sub-levels and unit words: fsmr:58(2) -> 58,
    fsmr:part12.chapter3 -> 3, mkt:app7 -> 7."""
    number = re.sub(r"\(.*", "", _number(key))
    return re.sub(r"^(?:part\w+\.)?(?:chapter|part|app|schedule)", "", number)


def miss_cause(res: Resolution, source: str, target: str, rows: list[dict[str, Any]]) -> str:
    if source == target:
        return "self_reference"
    if source not in res.chunks:
        return "source_not_in_corpus"
    if target not in res.chunks:
        return "target_not_in_corpus"
    chunk = res.chunks[source]
    found = [s for row in rows for s in spans(chunk.text, row["reference_text"])]
    if not found:
        return "reference_text_not_in_passage"
    near = [r for r in res.refs[source] if any(overlaps((r.start, r.end), s) for s in found)]
    if not near:
        return "no_reference_extracted"
    target_numbers = {_number(k) for k in res.chunks[target].keys}
    named = set().union(*(named_numbers(row["reference_text"]) for row in rows))
    if not any(plain_number(k) in named for k in res.chunks[target].keys):
        return "gold_target_not_named"
    if any(r.ref_type == OUTSIDE_TYPE for r in near):
        return "outside_instrument"
    if any(_number(r.normalized) in target_numbers for r in near):
        return "wrong_instrument"
    if all(not res.answering.get(r.normalized) for r in near):
        return "key_not_answered"
    return "resolved_elsewhere"


def extra_cause(
    res: Resolution,
    source: str,
    target: str,
    produced: list[tuple[str, str]],
    gold_by_source: dict[str, list[dict[str, Any]]],
    gold_pairs: set[tuple[str, str]],
) -> str:
    keys = {key for _, key in produced}
    if any(
        len(res.answering.get(k, ())) > 1 and any((source, t) in gold_pairs for t in res.answering[k]) for k in keys
    ):
        return "resolved_to_several"
    text = res.chunks[source].text
    gold_spans = [s for row in gold_by_source.get(source, []) for s in spans(text, row["reference_text"])]
    ref_spans = [(r.start, r.end) for r in res.refs[source] if r.normalized in keys]
    if any(overlaps(a, b) for a in ref_spans for b in gold_spans):
        return "other_target_of_gold_reference"
    return "not_a_gold_reference"
