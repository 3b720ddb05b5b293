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

Longer than 500 lines because the fixture generator's rules (entity patterns per pack, sentence
co-occurrence, confidence) are one deterministic function, read top-down.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rag_engine.graph.models import RawEntity, RawExtraction, RawRelationship
from rag_engine.packs import ChunkRecord, PackManifest

FIXTURE_SOURCE = "fixture:heuristic-demo-extractor"
MAX_ENTITIES = 8
MAX_RELATIONSHIPS = 8
WEAK_CONFIDENCE = 0.3
LABEL = "heuristic fixture"


@dataclass(frozen=True)
class Term:
    """One lexicon entry: the canonical name written to the graph, its type, its surface forms."""

    name: str
    type: str
    surface: str  # regex alternatives; matched case-insensitively on word boundaries
    gloss: str

    @property
    def pattern(self) -> re.Pattern[str]:
        return _compiled(self.surface)


_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(surface: str) -> re.Pattern[str]:
    if surface not in _CACHE:
        _CACHE[surface] = re.compile(rf"(?i)\b(?:{surface})\b")
    return _CACHE[surface]


# -- lexicons ---------------------------------------------------------------------------------
# `(?-i:...)` keeps a form case-sensitive where the lower-case word is ordinary English
# ("the Board" is the EDPB, "on board" is not).

LEGAL_TERMS: tuple[Term, ...] = (
    # actors
    Term("controller", "actor", r"controllers?", "decides purposes and means of processing"),
    Term("processor", "actor", r"processors?", "processes personal data for a controller"),
    Term("data subject", "actor", r"data subjects?", "the person the data is about"),
    Term("Member State", "actor", r"(?-i:Member States?)", "EU Member State"),
    Term("Commission", "actor", r"(?-i:Commission)", "European Commission"),
    Term("recipient", "actor", r"recipients?", "receives disclosed personal data"),
    Term("third party", "actor", r"third part(?:y|ies)", "party other than subject, controller, processor"),
    Term("representative", "actor", r"representatives?", "acts for a non-EU controller or processor"),
    Term(
        "data protection officer", "actor", r"data protection officers?|(?-i:DPO)", "advises on and monitors compliance"
    ),
    Term("certification body", "actor", r"certification bod(?:y|ies)", "issues certifications"),
    Term("monitoring body", "actor", r"monitoring bod(?:y|ies)", "monitors a code of conduct"),
    # authorities
    Term(
        "lead supervisory authority",
        "authority",
        r"lead supervisory authorit(?:y|ies)",
        "lead authority for cross-border processing",
    ),
    Term(
        "supervisory authority",
        "authority",
        r"supervisory authorit(?:y|ies)|data protection authorit(?:y|ies)",
        "independent public authority",
    ),
    Term(
        "European Data Protection Board",
        "authority",
        r"European Data Protection Board|(?-i:Board)|(?-i:EDPB)",
        "EU body of supervisory authorities",
    ),
    # rights
    Term("right of access", "right", r"right of access", "right to obtain one's data"),
    Term("right to rectification", "right", r"right to rectification", "right to correct inaccurate data"),
    Term("right to erasure", "right", r"right to erasure|right to be forgotten", "right to have data erased"),
    Term(
        "right to restriction of processing",
        "right",
        r"right to restriction of processing|right to obtain restriction of processing",
        "right to restrict processing",
    ),
    Term("right to data portability", "right", r"right to data portability", "right to receive and move data"),
    Term("right to object", "right", r"right to object", "right to object to processing"),
    Term(
        "right to lodge a complaint",
        "right",
        r"right to lodge a complaint|lodg(?:e|ing) a complaint",
        "right to complain to an authority",
    ),
    Term(
        "right not to be subject to automated decision-making",
        "right",
        r"right not to be subject to a decision based solely on automated processing",
        "right against solely automated decisions",
    ),
    Term(
        "right to withdraw consent",
        "right",
        r"right to withdraw (?:his or her )?consent",
        "right to withdraw consent at any time",
    ),
    # obligations
    Term(
        "data protection impact assessment",
        "obligation",
        r"data protection impact assessments?|(?-i:DPIA)",
        "assessment of high-risk processing",
    ),
    Term(
        "records of processing activities",
        "obligation",
        r"records? of processing activities",
        "record of processing kept by controller/processor",
    ),
    Term(
        "notification of a personal data breach",
        "obligation",
        r"notif(?:y|ication of) (?:a |the )?personal data breach(?:es)?",
        "breach notification duty",
    ),
    Term(
        "data protection by design and by default",
        "obligation",
        r"data protection by design(?: and by default)?",
        "built-in data protection",
    ),
    Term(
        "security of processing",
        "obligation",
        r"security of (?:the )?processing",
        "appropriate technical and organisational security",
    ),
    Term(
        "prior consultation", "obligation", r"prior consultation", "consult the authority before high-risk processing"
    ),
    # data categories
    Term(
        "special categories of personal data",
        "data_category",
        r"special categor(?:y|ies) of personal data",
        "sensitive personal data",
    ),
    Term("genetic data", "data_category", r"genetic data", "data on inherited or acquired genetic traits"),
    Term("biometric data", "data_category", r"biometric data", "data from biometric processing"),
    Term("data concerning health", "data_category", r"data concerning health", "health data"),
    Term("personal data", "data_category", r"personal data", "information on an identifiable person"),
    # instruments
    Term("Regulation (EU) 2016/679", "instrument", r"(?-i:[Tt]his Regulation)|Regulation \(EU\) 2016/679", "the GDPR"),
    Term("Directive 95/46/EC", "instrument", r"Directive 95/46/EC", "the repealed Data Protection Directive"),
    Term("Union law", "instrument", r"(?-i:Union law)", "law of the European Union"),
    Term("Member State law", "instrument", r"(?-i:Member State law)", "national law"),
    Term("code of conduct", "instrument", r"codes? of conduct", "sector code approved by an authority"),
    Term("certification", "instrument", r"certifications?(?: mechanisms?)?", "data protection certification"),
    Term("binding corporate rules", "instrument", r"binding corporate rules", "intra-group transfer rules"),
    Term(
        "standard data protection clauses", "instrument", r"standard data protection clauses", "model transfer clauses"
    ),
    # concepts
    Term("consent", "concept", r"consent", "freely given agreement of the data subject"),
    Term("profiling", "concept", r"profiling", "automated evaluation of personal aspects"),
    Term("pseudonymisation", "concept", r"pseudonymisation", "data no longer attributable without extra info"),
    Term("legitimate interests", "concept", r"legitimate interests?", "a legal basis for processing"),
    Term(
        "personal data breach", "concept", r"personal data breach(?:es)?", "breach of security affecting personal data"
    ),
)

KB_TERMS: tuple[Term, ...] = (
    # teams
    Term("Security team", "team", r"security team|security on-call|infosec", "runs security tooling and incidents"),
    Term(
        "Site Reliability Engineering",
        "team",
        r"site reliability engineering|(?-i:SRE)(?: team)?",
        "owns incident and on-call runbooks",
    ),
    Term("People team", "team", r"people team|(?-i:HR)(?! system)|human resources", "HR"),
    Term("IT service desk", "team", r"(?:IT )?service desk|IT helpdesk|helpdesk", "IT support"),
    Term("Finance", "team", r"(?-i:Finance)", "finance department"),
    Term("Procurement", "team", r"procurement", "negotiates vendor contracts"),
    Term("Legal and Privacy", "team", r"legal and privacy", "maintains retention schedule"),
    Term("data platform team", "team", r"data platform team", "owns analytics data platform"),
    Term("platform team", "team", r"platform team(?:'s)?", "owns database failover"),
    Term("Growth team", "team", r"growth team(?:'s)?", "product growth team"),
    Term("Engineering leadership", "team", r"engineering leadership", "leads engineering"),
    # people (roles)
    Term("CISO", "person", r"(?-i:CISO)", "chief information security officer"),
    Term("CFO", "person", r"(?-i:CFO)(?:'s)?", "chief financial officer"),
    Term("CTO", "person", r"(?-i:CTO)", "chief technology officer"),
    Term("Data Protection Officer", "person", r"data protection officer|(?-i:DPO)", "privacy officer"),
    Term("incident commander", "person", r"incident commanders?", "coordinates an incident"),
    Term("engineering manager on duty", "person", r"engineering managers? on duty", "escalation point"),
    Term("engineering manager", "person", r"engineering managers?", "manages an engineering team"),
    Term("system owner", "person", r"system owners?", "approves access to a system"),
    Term(
        "on-call engineer", "person", r"on-call engineers?|(?:primary|secondary) on-call(?: engineer)?", "answers pages"
    ),
    Term("operations lead", "person", r"operations lead", "applies the fix in an incident"),
    Term("department head", "person", r"department head", "approves larger spend"),
    # systems
    Term("single sign-on", "system", r"single sign-on|(?-i:SSO)", "company identity login"),
    Term(
        "multi-factor authentication",
        "system",
        r"multi-factor authentication|(?-i:MFA)|(?-i:2FA)|two-factor authentication",
        "second login factor",
    ),
    Term("VPN", "system", r"(?-i:VPN)(?: client)?|virtual private network", "remote access to internal tools"),
    Term("secrets manager", "system", r"secrets manager", "holds secrets and keys"),
    Term("password manager", "system", r"password manager", "stores passwords"),
    Term("access broker", "system", r"access broker", "grants just-in-time access"),
    Term("HR system", "system", r"(?-i:HR) system", "leave and offboarding records"),
    Term("paging tool", "system", r"paging tool", "on-call paging"),
    Term("expense tool", "system", r"expense tool", "expense claims"),
    Term("device management", "system", r"device management", "laptop enrolment and updates"),
    Term("status page", "system", r"status page", "public incident status"),
    Term("secret scanning", "system", r"(?:pre-commit )?secret scanning", "detects committed secrets"),
    Term(
        "production database replica",
        "system",
        r"(?:production )?database replicas?|reporting replica",
        "read-only analytics replica",
    ),
    # policies
    Term("Information Security Policy", "policy", r"information security policy|(?-i:POL-001)", "POL-001"),
    Term("record-keeping policy", "policy", r"record-keeping policy|(?-i:POL-002)", "POL-002, superseded"),
    Term("Data Retention Policy", "policy", r"data retention policy|(?-i:POL-004)", "POL-004"),
    Term("Expense Policy", "policy", r"expense policy|(?-i:POL-007)", "POL-007"),
    Term("Holiday and Leave Policy", "policy", r"holiday and leave policy|(?-i:POL-009)", "POL-009"),
    Term(
        "Access Control Policy",
        "policy",
        r"access control and access request process|access control policy|(?-i:POL-012)",
        "POL-012",
    ),
    Term("Vendor Onboarding Policy", "policy", r"vendor onboarding(?: policy| process)?|(?-i:POL-015)", "POL-015"),
    Term("Engineering Handbook", "policy", r"engineering handbook|(?-i:POL-018)", "POL-018"),
    Term("data processing agreement", "policy", r"data processing agreements?", "vendor contract on personal data"),
    # processes
    Term("incident response", "process", r"incident response(?: runbook)?|incident process|(?-i:RB-1)", "RB-1"),
    Term("on-call rotation", "process", r"on-call rotations?|on-call runbook|(?-i:RB-2)", "RB-2"),
    Term("database failover", "process", r"database failover|(?-i:RB-3)", "RB-3"),
    Term("VPN setup", "process", r"(?-i:VPN) setup guide|(?-i:RB-4)", "RB-4"),
    Term("access request process", "process", r"access request(?: process| tickets?)?s?", "how access is requested"),
    Term("quarterly access review", "process", r"(?:quarterly )?access reviews?", "periodic access confirmation"),
    Term("offboarding", "process", r"offboard(?:ing|ed)", "removing a leaver's access"),
    Term("post-incident review", "process", r"post-incident reviews?", "blameless incident review"),
    Term("security review", "process", r"security reviews?", "vendor security assessment"),
    Term("legal hold", "process", r"legal holds?", "suspends deletion"),
    Term("code review", "process", r"code reviews?", "pull request review"),
    Term("security awareness training", "process", r"security awareness training", "yearly training"),
)

# "this policy" / "the policy" in pol-001 names POL-001: the document's own policy or runbook.
KB_SELF: dict[str, str] = {
    "pol-001": "Information Security Policy",
    "pol-004": "Data Retention Policy",
    "pol-007": "Expense Policy",
    "pol-009": "Holiday and Leave Policy",
    "pol-012": "Access Control Policy",
    "pol-015": "Vendor Onboarding Policy",
    "pol-018": "Engineering Handbook",
    "rb-1": "incident response",
    "rb-2": "on-call rotation",
    "rb-4": "VPN setup",
}
_SELF_REF = re.compile(r"(?i)\b(?:this|the) (?:policy|runbook|guide|handbook)\b")

LEXICONS: dict[str, tuple[Term, ...]] = {"legal_regulatory": LEGAL_TERMS, "company_x_kb": KB_TERMS}


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
        hits += [_Hit(m.start(), m.end(), self_term) for m in _SELF_REF.finditer(text)]
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
