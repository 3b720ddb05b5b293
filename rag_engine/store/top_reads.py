"""The query path's one read after fusion: what the stages after it need of the top candidates,
in one statement of the question's read transaction instead of three.

For each chunk id (served only: ``reads.SERVED``):

- its document's title (``reads.title_shown``, the rule of ``reads.document_titles``: only a
  document of an enabled pack in a permitted collection gives one);
- for the ids in ``evidence_ids``: the chunk's cosine to the question and its unit vectors, as
  stored by ``ingest.unit_vectors`` (active index only, checked by ``epochs.active_index``);
- with ``references``: the chunks it cites (``REFERENCES``, one hop, served), each with the
  citation's raw text and its own document's title, so reference expansion over any seeds among
  these ids needs no statement of its own (``retrieval.expansion``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rag_engine.store.epochs import active_index
from rag_engine.store.reads import FIELDS, scope, served, title_shown
from rag_engine.store.session import Reads, Started
from rag_engine.store.units import UNITS_SUFFIX


def _title(d: str, c: str) -> str:
    """A served chunk's (``c``) document (``d``), when its title may be shown (``reads.title_shown``)."""
    return f"OPTIONAL MATCH ({d}:Document {{key: {c}.pack + ':' + {c}.doc_id}}) WHERE {title_shown(d)}"


def statement(ids: str = "$ids", evidence_ids: str = "$evidence_ids") -> str:
    """The one read over the chunk ids ``ids`` (a parameter, or a variable of an enclosing
    statement: ``store.measurement`` composes it), cosines and units for ``evidence_ids``."""
    return f"""
UNWIND {ids} AS id
MATCH (c:Chunk {{chunk_id: id}}) WHERE {served("c")}
{_title("d", "c")}
WITH c, d, c.chunk_id IN {evidence_ids} AS scored
RETURN c.chunk_id AS chunk_id, d.key AS doc_key, d.title AS title,
  CASE WHEN NOT scored OR $embedding IS NULL OR c[$property] IS NULL THEN null
  ELSE vector.similarity.cosine(c[$property], $embedding) END AS cosine,
  CASE WHEN scored AND c.units_splitter = $splitter THEN c[$units] END AS units,
  CASE WHEN $references THEN COLLECT {{
    MATCH (c)-[e:REFERENCES]->(t:Chunk) WHERE {served("t")}
    {_title("td", "t")}
    RETURN {{{", ".join(f"{f}: t.{f}" for f in FIELDS)}, via: e.raw, doc_key: td.key, title: td.title}}
  }} ELSE [] END AS cited
"""


_TOP = statement()


@dataclass
class TopReads:
    """What the one read gave (``StartedTop.result``): ``evidence`` per scored chunk id
    (``cosine``, ``units``), ``titles`` per document key (``pack:doc_id``), ``cited`` per chunk id
    (the rows it cites: the chunk fields, ``via``) when references were read, and ``titles`` of
    those rows' documents too."""

    evidence: dict[str, dict[str, Any]] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    cited: dict[str, list[dict[str, Any]]] | None = None


@dataclass
class StartedTop:
    """The one read (see the module docstring), sent; ``result`` receives it (``Started``: once,
    the same rows on every call); ids not served are absent."""

    statement: Started | None
    evidence_ids: list[str]
    references: bool

    def result(self) -> TopReads:
        out = TopReads(cited={} if self.references else None)
        if self.statement is None:
            return out
        scored = set(self.evidence_ids)
        for r in self.statement.values():
            if r["doc_key"] is not None:
                out.titles[r["doc_key"]] = r["title"] or ""
            if r["chunk_id"] in scored:
                out.evidence[r["chunk_id"]] = {"cosine": r["cosine"], "units": r["units"]}
            if out.cited is not None:
                cited = [dict(t) for t in r["cited"]]
                for t in cited:
                    if t["doc_key"] is not None:
                        out.titles[t["doc_key"]] = t["title"] or ""
                out.cited[r["chunk_id"]] = cited
        return out


def started(
    rx: Reads,
    chunk_ids: list[str],
    *,
    evidence_ids: list[str],
    embedding: list[float] | None,
    identity: str,
    collections: tuple[str, ...],
    splitter: str,
    references: bool,
) -> StartedTop:
    """The one read over ``chunk_ids`` sent (``Reads.started``): the caller works on what does not
    need it while the store answers, then takes it with ``StartedTop.result``."""
    if not chunk_ids:
        return StartedTop(None, evidence_ids, references)
    active, _cached = active_index(rx, identity)
    statement = rx.started(
        _TOP,
        ids=chunk_ids,
        evidence_ids=evidence_ids,
        embedding=embedding,
        **parameters(active.property, splitter=splitter, references=references),
        **scope(rx, collections),
    )
    return StartedTop(statement, evidence_ids, references)


def parameters(prop: str, *, splitter: str, references: bool) -> dict[str, Any]:
    """``statement``'s parameters of the active index (``prop``: its vector property, beside which
    the unit vectors are stored) and of what it reads, but the ids, the embedding and the scope."""
    return {"property": prop, "units": prop + UNITS_SUFFIX, "splitter": splitter, "references": references}
