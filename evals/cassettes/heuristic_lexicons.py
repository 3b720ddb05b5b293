"""The heuristic fixture extractor's lexicons (``evals.cassettes.heuristic_extractor``): per pack,
the hand-written terms it recognises (canonical name, type, surface forms as regex alternatives,
gloss) and the documents whose "this policy" names their own policy. FIXTURE data, not a model."""

from __future__ import annotations

import re
from dataclasses import dataclass


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
SELF_REF = re.compile(r"(?i)\b(?:this|the) (?:policy|runbook|guide|handbook)\b")

LEXICONS: dict[str, tuple[Term, ...]] = {"legal_regulatory": LEGAL_TERMS, "company_x_kb": KB_TERMS}
