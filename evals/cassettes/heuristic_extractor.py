"""A deterministic, rule-based stand-in for the LLM graph extractor: FIXTURE data, not a model.

It exists only to fill the demo replay cassette (evals/cassettes/demo.jsonl), so `make demo`
and CI can run the llm_extraction step offline. It is not a model: entities come from a
small hand-written per-pack lexicon (case-insensitive regexes on word boundaries), and
relationships from cue words inside one sentence. Every description says so.

Guarantees, checked by tests/test_demo_cassette.py:
- entity and relationship types come from the pack manifest's whitelists;
- every relationship connects two entities listed in the same output (no self loops);
- at most MAX_ENTITIES entities and MAX_RELATIONSHIPS relationships per chunk;
- same input, same output (pure function, no clock, no randomness).

Plain co-occurrence in one sentence yields a weak relationship at WEAK_CONFIDENCE (0.3), on
purpose below the 0.5 retrieval floor: such records are stored but never retrieval-eligible.

The per-pack lexicons are ``evals.cassettes.heuristic_lexicons``; the matching, sentence
co-occurrence and relationship rules are here.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from evals.cassettes.heuristic_lexicons import KB_SELF, KB_TERMS, LEXICONS, SELF_REF, Term
from rag_engine.graph.models import RawEntity, RawExtraction, RawRelationship
from rag_engine.packs import ChunkRecord, PackManifest

FIXTURE_SOURCE = "fixture:heuristic-demo-extractor"
MAX_ENTITIES = 8
MAX_RELATIONSHIPS = 8
WEAK_CONFIDENCE = 0.3
LABEL = "heuristic fixture"


# -- matching ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Hit:
    start: int
    end: int
    term: Term


def _self_term(pack_name: str, doc_id: str) -> Term | None:
    if pack_name != "company_x_kb":
        return None
    by_name = {t.name: t for t in KB_TERMS}
    for prefix, name in KB_SELF.items():
        if doc_id == prefix or doc_id.startswith(prefix + "-"):
            return by_name[name]
    return None


def find_mentions(text: str, terms: Iterable[Term], self_term: Term | None = None) -> list[_Hit]:
    """Non-overlapping mentions, longest match first where two overlap, in text order."""
    hits = [_Hit(m.start(), m.end(), t) for t in terms for m in t.pattern.finditer(text)]
    if self_term is not None:
        hits += [_Hit(m.start(), m.end(), self_term) for m in SELF_REF.finditer(text)]
    hits.sort(key=lambda h: (h.start, -(h.end - h.start)))
    kept: list[_Hit] = []
    for h in hits:
        if not kept or h.start >= kept[-1].end:
            kept.append(h)
    return kept


_SENTENCE = re.compile(r"(?<=[.;!?])\s+|\n+")


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) spans of sentences; list items and numbered points count as sentences."""
    spans, start = [], 0
    for m in _SENTENCE.finditer(text):
        if m.start() > start:
            spans.append((start, m.start()))
        start = m.end()
    if start < len(text):
        spans.append((start, len(text)))
    return spans


# -- relationship rules -----------------------------------------------------------------------
# A rule sees one sentence (lower-cased, entity mentions blanked out), its entities in order of
# mention, and the document's own term when the chunk names it ("this policy"); it proposes
# (source, target, type, confidence, cue) tuples. Later dedup keeps the highest confidence.

Proposal = tuple[str, str, str, float, str]
Rule = Callable[[str, list[Term], "Term | None"], list[Proposal]]


def _cue(pattern: str, sentence: str) -> str | None:
    m = re.search(pattern, sentence)
    return m.group(0) if m else None


def _of(ents: list[Term], *types: str) -> list[Term]:
    return [e for e in ents if e.type in types]


def _pairs(sources: list[Term], targets: list[Term], rel: str, conf: float, cue: str) -> list[Proposal]:
    return [(s.name, t.name, rel, conf, cue) for s in sources for t in targets if s.name != t.name]


_LAWMAKERS = ("Member State", "Member State law", "Union law")
_SUPERVISED = ("controller", "processor", "representative", "certification body", "monitoring body")
# instruments that can bind someone (not the repealed Directive, not a certification)
_BINDING = (
    "Regulation (EU) 2016/679",
    "Union law",
    "Member State law",
    "code of conduct",
    "binding corporate rules",
    "standard data protection clauses",
)


def _legal_rules(s: str, ents: list[Term], home: Term | None) -> list[Proposal]:
    out: list[Proposal] = []
    actors, authorities = _of(ents, "actor"), _of(ents, "authority")
    rights, obligations, instruments = _of(ents, "right"), _of(ents, "obligation"), _of(ents, "instrument")
    lawmakers = [e for e in ents if e.name in _LAWMAKERS]
    if cue := _cue(r"supervis\w*|monitor\w*|investigat\w*|(?<!in )\border\w*", s):
        out += _pairs(authorities, [a for a in actors if a.name in _SUPERVISED], "supervises", 0.85, cue)
    subject = [e for e in ents if e.name == "data subject"]
    if subject:
        out += _pairs(rights, subject, "applies_to", 0.8, "right of the data subject")
    if cue := _cue(r"\bshall\b", s):
        duty_bearers = [a for a in actors if a.name not in ("data subject", "Member State", "Commission")]
        out += _pairs(obligations, duty_bearers, "applies_to", 0.8, cue)
    if cue := _cue(r"restrict\w*", s):
        out += _pairs(lawmakers, rights, "restricts", 0.75, cue)
    if cue := _cue(r"\b(?:provide[sd]?|grant\w*|confer\w*)\b", s):
        out += _pairs([e for e in instruments if e.name not in _LAWMAKERS], rights, "grants_right", 0.7, cue)
    if cue := _cue(r"\b(?:shall|must)\b", s):
        binding = [i for i in instruments if i.name in _BINDING]
        out += _pairs(binding, [a for a in actors if a.name != "data subject"], "obliges", 0.7, cue)
    if cue := _cue(r"exempt\w*|derogat\w*", s):
        source = (lawmakers or authorities)[:1]
        targets = [e for e in obligations + rights + actors if e.name not in _LAWMAKERS][:1]
        out += _pairs(source, targets, "exempts", 0.6, cue)
    return out


def _kb_rules(s: str, ents: list[Term], home: Term | None) -> list[Proposal]:
    out: list[Proposal] = []
    agents = _of(ents, "team", "person")
    policies, processes, systems = _of(ents, "policy"), _of(ents, "process"), _of(ents, "system")
    # "It is approved by the CISO": with no policy or process in the sentence, the subject is
    # taken to be the document's own policy, if the chunk names it.
    owned = policies + processes or ([home] if home is not None else [])
    if cue := _cue(r"\bown(?:s|er|ers|ed)?\b|\bmaintains?\b|\bruns?\b|\bresponsible\b|\bleads?\b", s):
        out += _pairs(agents, owned + systems, "owns", 0.8, cue)
    if cue := _cue(r"approv\w*", s):
        out += _pairs(agents, owned, "approves", 0.8, cue)
    if len(agents) >= 2 and (cue := _cue(r"escalat\w*|\bpag(?:e|es|ed|ing)\b|\binform\w*|\bcontact\w*|\breport\w*", s)):
        out += _pairs(agents[:1], agents[1:], "escalates_to", 0.75, cue)
    if len(policies) >= 2 and (cue := _cue(r"supersed\w*|replac\w*", s)):
        out += _pairs(policies[:1], policies[1:2], "supersedes", 0.85, cue)
    if cue := _cue(r"\brequire[sd]?\b|\bneeds?\b|\bthrough\b|\bvia\b|\buses?\b|\bdepends?\b", s):
        users = [e for e in ents if e.type in ("process", "system")]
        out += [
            (a.name, b.name, "depends_on", 0.6, cue)  # the earlier mention depends on the later
            for i, a in enumerate(users)
            for b in users[i + 1 :]
            if b.type == "system"
        ]
    if cue := _cue(r"\bappl(?:y|ies)\b|\bscope\b|\bcovers?\b|\bfollow\w*", s):
        out += _pairs(policies, agents + systems + processes, "applies_to", 0.7, cue)
    return out


_RULES: dict[str, Rule] = {"legal_regulatory": _legal_rules, "company_x_kb": _kb_rules}
# Type for plain co-occurrence: refers_to where the pack allows it; the KB pack has no neutral
# type, so its weak co-occurrence records use applies_to (still below the retrieval floor).
_WEAK_TYPE: dict[str, str] = {"legal_regulatory": "refers_to", "company_x_kb": "applies_to"}


def _describe(src: str, dst: str, rel: str, cue: str | None) -> str:
    if cue is None:
        return f"{LABEL}: {src} and {dst} co-occur in one sentence"
    return f"{LABEL}: {src} {rel.replace('_', ' ')} {dst} (cue '{cue}')"


def heuristic_extraction(pack_name: str, manifest: PackManifest, chunk: ChunkRecord) -> RawExtraction:
    """The fixture extraction for one chunk; deterministic, whitelist-safe, self-consistent."""
    terms = [t for t in LEXICONS.get(pack_name, ()) if t.type in manifest.entity_types]
    home = _self_term(pack_name, chunk.doc_id)
    hits = find_mentions(chunk.text, terms, home)

    kept: dict[str, Term] = {}
    for h in hits:  # first mentioned first; cap the list
        if h.term.name not in kept and len(kept) < MAX_ENTITIES:
            kept[h.term.name] = h.term
    entities = [RawEntity(name=t.name, type=t.type, description=f"{LABEL}: {t.gloss}") for t in kept.values()]

    rule = _RULES.get(pack_name)
    weak = _WEAK_TYPE.get(pack_name)
    allowed = set(manifest.relationship_types)
    proposals: dict[tuple[str, str, str], tuple[int, float, str | None]] = {}
    order = 0

    def propose(src: str, dst: str, rel: str, conf: float, cue: str | None) -> None:
        nonlocal order
        if rel not in allowed or src == dst:
            return
        key = (src, dst, rel)
        if key not in proposals:
            proposals[key] = (order, conf, cue)
            order += 1
        elif proposals[key][1] < conf:
            proposals[key] = (proposals[key][0], conf, cue)

    for start, end in sentences(chunk.text):
        inside = [h for h in hits if start <= h.start < end]
        seen: dict[str, Term] = {}
        for h in inside:
            if h.term.name in kept:
                seen.setdefault(h.term.name, h.term)
        ents = list(seen.values())
        if len(ents) < 2:
            continue
        # cue words are searched outside the entity mentions ("supervisory authority" is no cue)
        chars = list(chunk.text[start:end].lower())
        for h in inside:
            chars[h.start - start : min(h.end, end) - start] = " " * (min(h.end, end) - h.start)
        lowered = "".join(chars)
        named_home = home if home is not None and home.name in kept else None
        for src, dst, rel, conf, cue in rule(lowered, ents, named_home) if rule else []:
            propose(src, dst, rel, conf, cue)
        linked = {frozenset((k[0], k[1])) for k in proposals}
        if weak is not None:
            for a, b in itertools.pairwise(ents):
                if frozenset((a.name, b.name)) not in linked:
                    propose(a.name, b.name, weak, WEAK_CONFIDENCE, None)

    ranked = sorted(proposals.items(), key=lambda kv: (-kv[1][1], kv[1][0]))[:MAX_RELATIONSHIPS]
    ranked.sort(key=lambda kv: kv[1][0])
    relationships = [
        RawRelationship(
            source=src,
            target=dst,
            type=rel,
            description=_describe(src, dst, rel, cue),
            confidence=conf,
        )
        for (src, dst, rel), (_, conf, cue) in ranked
    ]
    return RawExtraction(entities=entities, relationships=relationships)
