"""The two legs that read the question's words: exact references (the rules and articles it names,
and optionally its whole content phrase) and the fulltext (BM25) leg."""

from __future__ import annotations

from typing import Any

from rag_engine.graph.planner import content_terms
from rag_engine.packs import DomainPack
from rag_engine.retrieval.leg import Leg, Question, register_leg
from rag_engine.store import reads


def question_references(engine: Any, text: str, packs: list[DomainPack] | None = None) -> tuple[list[str], str]:
    """(keys ``pack|key`` named in the question, the question without those references), through
    each pack's ``query_references`` (the question side of the pack's key scoping)."""
    keys: list[str] = []
    spans: list[tuple[int, int]] = []
    for pack in packs if packs is not None else engine.packs.values():
        for r in pack.query_references(text):
            keys.append(f"{pack.name}|{r.normalized}")
            spans.append((r.start, r.end))
    residual = text
    for start, end in sorted(set(spans), reverse=True):
        if 0 <= start < end <= len(residual):
            residual = residual[:start] + " " + residual[end:]
    return list(dict.fromkeys(keys)), residual


def exact_hits(
    rows: list[dict[str, Any]], docs_by_key: dict[str, list[str]], lexical: list[dict[str, Any]], limit: int
) -> tuple[list[dict[str, Any]], list[str], set[str]]:
    """(exact rows, ambiguous keys, documents answering an ambiguous key).

    An exact hit answers to a key that resolves to exactly one document; at most ``limit`` of
    them, ordered by the chunk's lexical rank for the question (unranked ones after, in document
    order), never by document id alone.
    """
    ambiguous = sorted(k for k, docs in docs_by_key.items() if len(docs) > 1)
    ambiguous_docs = {d for k in ambiguous for d in docs_by_key[k]}
    unique = [r for r in rows if any(len(docs_by_key.get(k, ())) == 1 for k in r["keys"])]
    lex_rank = {r["chunk_id"]: i for i, r in enumerate(lexical)}
    unique.sort(key=lambda r: (lex_rank.get(r["chunk_id"], len(lex_rank)), r["pack"], r["doc_id"], r["ordinal"]))
    return unique[:limit], ambiguous, ambiguous_docs


@register_leg("exact")
class ExactReferenceLeg(Leg):
    """Chunks answering to the references the question names (``q.refs``: keys, lookup); after the
    other legs, at most ``retrieval.max_exact`` of them ranked by their lexical rank, plus (with
    ``retrieval.exact_phrase``) the lexical hits holding the question's whole content phrase."""

    step = "exact_references"

    def trace_info(self, q: Question) -> dict[str, Any]:
        return {"weight": q.weight(self.name), "max_exact": q.engine.cfg.retrieval.max_exact}

    def search(self, q: Question, t: dict[str, Any]) -> list[dict[str, Any]]:
        cfg = q.engine.cfg.retrieval
        keys, residual = (
            question_references(q.engine, q.text, q.packs)
            if q.weight(self.name) > 0 or cfg.ambiguous_ref_boost
            else ([], q.text)
        )
        key_rows, docs_by_key = reads.by_keys(q.rx, keys, q.collections)
        # a question that is little more than its reference ("What does Article 17(1) require?")
        # is a lookup: its exact hits lead; otherwise they are one fused leg among the others
        lookup = bool(keys) and len(content_terms(residual)) <= cfg.lookup_max_terms
        q.refs.keys, q.refs.key_rows, q.refs.docs_by_key, q.refs.lookup = keys, key_rows, docs_by_key, lookup
        t.update(keys=keys, answered=len(key_rows), lookup=lookup)
        return key_rows

    def finish(self, q: Question) -> list[dict[str, Any]]:
        cfg = q.engine.cfg.retrieval
        if q.weight(self.name) <= 0:
            return []
        lexical = q.rows.get("lexical", [])
        exact_rows, q.refs.ambiguous, q.refs.ambiguous_docs = exact_hits(
            q.refs.key_rows, q.refs.docs_by_key, lexical, cfg.max_exact
        )
        ref_ids = {r["chunk_id"] for r in exact_rows}
        phrase = " ".join(content_terms(q.text))
        phrase_rows = []
        if cfg.exact_phrase and len(phrase.split()) >= 2:  # holds the whole question
            phrase_rows = [
                r
                for r in lexical
                if r["chunk_id"] not in ref_ids and phrase in " ".join(content_terms(f"{r['heading']} {r['text']}"))
            ][: cfg.max_exact]
        q.refs.phrase_ids = {r["chunk_id"] for r in phrase_rows}
        q.refs.exact_ids = ref_ids | q.refs.phrase_ids
        return exact_rows + phrase_rows


@register_leg("lexical")
class LexicalLeg(Leg):
    """The fulltext (BM25) leg. Its statement also carries the vector leg when the question's
    embedding is ready by then (one round trip for both legs and the store epochs): those rows
    are left for the dense leg in ``q.shared["dense_rows"]``."""

    def search(self, q: Question, t: dict[str, Any]) -> list[dict[str, Any]]:
        cfg = q.engine.cfg.retrieval
        embedding = q.shared.get("embedding")
        # an embedding already computed rides along; one still being computed is not waited for here
        early = embedding.outcome(wait=False) if embedding is not None else None
        q.shared["early_embedding"] = early
        ready = early if isinstance(early, tuple) and any(early[0]) else None
        lexical, q.shared["dense_rows"] = reads.legs(
            q.rx,
            q.text if q.weight(self.name) > 0 or q.weight("exact") > 0 else "",
            ready[0] if ready is not None else None,
            q.collections,
            lexical_k=cfg.lexical_k,
            dense_k=cfg.dense_k,
            identity=q.engine.embedder_identity,
        )
        t["hits"] = len(lexical)
        return lexical
