"""Graph query planner: may traversal run for this question, and from which seed entities?

Traversal is a bet that the inferred graph knows something the text search does not. The
planner refuses the bet, with an explicit reason code in the trace, whenever it is unsafe or
pointless:

  simple_question          too few content terms, or a lookup naming several entities but no
                           relationship: lexical + dense retrieval already answer it
  missing_graph_entities   no entity of a permitted pack matches the question
  ambiguous_entity_match   more matches than planner.max_ambiguous_matches: seeds would be guesses
  single_entity_query      one entity and no relationship asked about: its own chunks are the answer
  no_eligible_edges        no retrieval-eligible edge above the floor exists in the permitted packs
                           and collections at all: nothing to traverse, so no entity is looked up
                           (a per-process fact cached until a graph write, ``store.epochs``)
Otherwise the decision is ``traverse`` with the seeds. Thresholds come from config. Every read
runs in the question's read transaction (``store.session.Reads``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from rag_engine.config import PlannerConfig, TraversalConfig
from rag_engine.graph.entity_resolution import EntityResolver, normalize_name
from rag_engine.packs import DomainPack
from rag_engine.store import graph_reads
from rag_engine.store.epochs import any_eligible_edge
from rag_engine.store.reads import lucene_escape
from rag_engine.store.session import Reads
from rag_engine.text.analyzer import QUERY_TERMS
from rag_engine.text.terms import content_words, stem, tokens

_GENERIC_RELATIONAL = (
    "between relate related relation relationship relationships connect connected connection link linked "
    "depend depends dependency responsible responsibility interact interaction"
)

TRAVERSE = "traverse"
FALLBACKS = (
    "simple_question",
    "no_eligible_edges",
    "missing_graph_entities",
    "ambiguous_entity_match",
    "single_entity_query",
    "low_confidence_match",
)


class Seed(BaseModel):
    model_config = ConfigDict(frozen=True)

    entity_id: str
    name: str
    pack: str
    score: float


class PlanDecision(BaseModel):
    model_config = ConfigDict(frozen=True)

    traverse: bool
    reason: str
    seeds: tuple[Seed, ...] = ()
    matches: int = 0
    detail: str = ""


def content_terms(question: str) -> list[str]:
    """The question's terms (the analyzer's ``QUERY_TERMS`` profile: the planner's stopwords out, no stem)."""
    return QUERY_TERMS.terms(question)


def _verb(relationship_type: str) -> str:
    """The verb of a relationship type: 'depends_on' -> 'depends', 'grants_right' -> 'grants'."""
    return relationship_type.split("_")[0]


def relational_stems(packs: list[DomainPack]) -> frozenset[str]:
    """Stems of the packs' relationship verbs ('applies_to' -> 'appli', which 'apply' and
    'applicable' share) and of generic relationship words ('between', 'related'): a question
    using one asks about a relationship, which is what traversal is for. Whole stems are
    compared, never prefixes: 'supervisory' (stem 'supervisori') does not ask what 'supervises'."""
    words = set(_GENERIC_RELATIONAL.split())
    for pack in packs:
        words.update(_verb(rel) for rel in pack.manifest.relationship_types)
    return frozenset(stem(w) for w in words)


def asks_relationship(question: str, stems: frozenset[str], entity_names: list[str]) -> bool:
    """Whether a content word of the question, outside the entity names it matched, is a
    relationship word: 'supervisory' inside 'supervisory authority' names the entity."""
    inside = {stem(w) for name in entity_names for w in tokens(name)}
    return any(s in stems and s not in inside for s in (stem(w) for w in content_words(question)))


def _name_stems(name: str) -> list[str]:
    return [stem(w) for w in tokens(name)]


def _contained(inner: list[str], outer: list[str]) -> bool:
    """Whether the word sequence ``inner`` occurs inside the longer ``outer``."""
    n = len(inner)
    return n < len(outer) and any(outer[i : i + n] == inner for i in range(len(outer) - n + 1))


def distinct_entities(seeds: list[Seed]) -> list[Seed]:
    """The seeds without those whose name is part of another seed's name: a question about the
    'supervisory authority' names one entity, not also 'authority'."""
    names = {s.entity_id: _name_stems(s.name) for s in seeds}
    return [s for s in seeds if not any(_contained(names[s.entity_id], names[o.entity_id]) for o in seeds)]


ENTITY_FETCH_CAP = 5000


def match_entities(
    rx: Reads,
    question: str,
    packs: list[DomainPack],
    collections: tuple[str, ...],
    limit: int = 25,
) -> list[Seed]:
    """Entities named in the question (whole normalized name, or a pack alias), best first; only
    entities a current chunk of a permitted collection mentions (the policy gate covers names)."""
    names = {p.name for p in packs}
    q = lucene_escape(question)
    if not q.strip() or not names:
        return []
    # the index cannot filter by pack or collection, so it is over-fetched and the fetch grows
    # (x4, up to ENTITY_FETCH_CAP) while the index has more hits than were kept: other packs'
    # entities of the same name (many packs in one database) must not push this pack's out
    fetch = limit * 4
    while True:
        total, found = graph_reads.entity_hits(rx, q=q, packs=sorted(names), fetch=fetch, collections=collections)
        if len(found) >= limit or total < fetch or fetch >= ENTITY_FETCH_CAP:
            break
        fetch = min(fetch * 4, ENTITY_FETCH_CAP)
    rows = found
    question_stems = {stem(w) for w in tokens(question)} | {stem(w) for w in tokens(normalize_name(question))}
    normalized_question = " " + normalize_name(question) + " "
    seeds: dict[str, Seed] = {}
    for row in rows:
        name_stems = _name_stems(row["normalized"])
        overlap = sum(1 for t in name_stems if t in question_stems) / max(1, len(name_stems))
        if f" {row['normalized']} " in normalized_question:
            overlap = 1.0
        seeds[row["entity_id"]] = Seed(
            entity_id=row["entity_id"], name=row["name"], pack=row["pack"], score=round(overlap, 3)
        )
    for pack in packs:  # aliases named in the question resolve to their canonical entity
        resolver = EntityResolver(pack.name, pack.manifest.aliases)
        for canonical, aliases in pack.manifest.aliases.items():
            if any(f" {normalize_name(a)} " in normalized_question for a in (canonical, *aliases)):
                norm = resolver.resolve(canonical)
                eid = resolver.entity_id(norm)
                name = graph_reads.mentioned_entity_name(rx, entity_id=eid, collections=collections)
                if name is not None:
                    seeds[eid] = Seed(entity_id=eid, name=name, pack=pack.name, score=1.0)
    return sorted(seeds.values(), key=lambda s: (-s.score, s.name))[:limit]


def eligible_edge_count(rx: Reads, seed_ids: list[str], floor: float, collections: tuple[str, ...]) -> int:
    return graph_reads.eligible_edge_count(rx, ids=seed_ids, floor=floor, collections=collections)


def plan(
    rx: Reads,
    question: str,
    packs: list[DomainPack],
    planner: PlannerConfig,
    traversal: TraversalConfig,
    collections: tuple[str, ...],
) -> PlanDecision:
    terms = content_terms(question)
    if len(terms) < planner.min_query_terms:
        return PlanDecision(
            traverse=False, reason="simple_question", detail=f"{len(terms)} content terms < {planner.min_query_terms}"
        )
    edges, _cached = any_eligible_edge(rx, [p.name for p in packs], collections, traversal.confidence_floor)
    if not edges:
        return PlanDecision(
            traverse=False,
            reason="no_eligible_edges",
            detail=f"no retrieval-eligible edge >= {traversal.confidence_floor} in the permitted collections",
        )
    matches = distinct_entities(
        [s for s in match_entities(rx, question, packs, collections) if s.score >= planner.min_entity_match_score]
    )
    if not matches:
        return PlanDecision(
            traverse=False,
            reason="missing_graph_entities",
            detail=f"no entity matched with score >= {planner.min_entity_match_score}",
        )
    if len(matches) > planner.max_ambiguous_matches:
        return PlanDecision(
            traverse=False,
            reason="ambiguous_entity_match",
            matches=len(matches),
            detail=f"{len(matches)} entities matched > {planner.max_ambiguous_matches}",
        )
    relational = asks_relationship(question, relational_stems(packs), [s.name for s in matches])
    if not relational and len(matches) < planner.min_seed_entities:
        return PlanDecision(
            traverse=False,
            reason="single_entity_query",
            seeds=tuple(matches),
            matches=len(matches),
            detail="one entity and no relationship in the question",
        )
    if not relational:
        # graph evidence answers questions about relationships; a lookup that merely names
        # several entities is better served by the text search, and traversal would flood it
        return PlanDecision(
            traverse=False,
            reason="simple_question",
            seeds=tuple(matches),
            matches=len(matches),
            detail="no relationship asked",
        )
    if eligible_edge_count(rx, [s.entity_id for s in matches], traversal.confidence_floor, collections) == 0:
        return PlanDecision(
            traverse=False,
            reason="low_confidence_match",
            seeds=tuple(matches),
            matches=len(matches),
            detail=f"no retrieval-eligible edge >= {traversal.confidence_floor} at the seeds",
        )
    return PlanDecision(traverse=True, reason=TRAVERSE, seeds=tuple(matches), matches=len(matches))
