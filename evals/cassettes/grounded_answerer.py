"""FIXTURE answers to the engine's answer requests: what a careful model would do, by fixed rules.

No model writes these answers. ``GroundedFixtureBackend`` reads the numbered context blocks out
of the answer prompt (``rag_engine.retrieval.answer.build_messages``) and answers from them:

- the answer is the first sentences of the top block, prefixed ``fixture answer (no model):``;
- it cites the top block and any of the next two blocks holding at least half of the
  question's content terms: only chunk ids of blocks the prompt holds, never an invented one;
- a prompt whose blocks hold none of the question's content terms gets
  ``insufficient_evidence: true`` and no citations.

The usage is made up like the extraction fixture's (characters / 4), so the eval's token path
runs on realistic-looking numbers that were never measured: it says so (``reported: false``, an
``estimate``), and every cost priced from it is marked estimated.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel

from rag_engine.errors import ProviderResponseInvalid
from rag_engine.graph.planner import content_terms
from rag_engine.providers.results import Completion, Embeddings, TokenUsage
from rag_engine.retrieval.answer import AnswerDraft
from rag_engine.retrieval.context import TEXT_FENCE

ANSWER_SOURCE = "fixture:grounded-demo-answerer"
"""The ``source`` of every fixture answer entry in a cassette."""
REPORTED_MODEL = "fixture-grounded-demo-answerer"
"""The model the fixture says answered: the usage ledger and the eval report show it."""
LABEL = "fixture answer (no model):"

_BLOCK = re.compile(r"^\[(\d+)\] chunk_id=(\S+) doc=\S+ anchor=\S+(?: \| .*)?$", re.M)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_MAX_CHARS = 600


def context_blocks(prompt: str) -> tuple[str, list[tuple[str, str]]]:
    """(question, [(chunk_id, text), ...] in prompt order) of an answer prompt's last user message."""
    head, sep, question = prompt.rpartition("\n\nQuestion: ")
    _, found, context = head.partition("Context:\n")
    if not sep or not found:
        raise ProviderResponseInvalid("fixture answerer: the prompt is not an answer request (no context/question)")
    heads = list(_BLOCK.finditer(context))
    blocks = []
    for i, match in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(context)
        fenced = context[match.end() : end].strip("\n").split("\n")
        text = "\n".join(line.removeprefix(TEXT_FENCE) for line in fenced)  # the block's own text, unfenced
        blocks.append((match.group(2), text.strip()))
    return question.strip(), blocks


def _first_sentences(text: str, limit: int = 2) -> str:
    sentences = [s.strip() for s in _SENTENCE_END.split(text.strip()) if s.strip()]
    out = " ".join(sentences[:limit])
    return out if len(out) <= _MAX_CHARS else out[:_MAX_CHARS].rsplit(" ", 1)[0] + " ..."


def grounded_draft(question: str, blocks: list[tuple[str, str]]) -> AnswerDraft:
    """The fixture's answer to ``question`` from ``blocks`` (deterministic)."""
    terms = set(content_terms(question))

    def share(text: str) -> float:
        return len(terms & set(content_terms(text))) / len(terms) if terms else 1.0

    usable = [(cid, text) for cid, text in blocks if _first_sentences(text)]
    if not usable or not any(share(text) > 0 for _, text in usable):
        return AnswerDraft(answer="", citations=[], insufficient_evidence=True)
    top_id, top_text = usable[0]
    cited = [top_id] + [cid for cid, text in usable[1:3] if share(text) >= 0.5]
    return AnswerDraft(
        answer=f"{LABEL} {_first_sentences(top_text)}",
        citations=list(dict.fromkeys(cited)),
        insufficient_evidence=False,
    )


class GroundedFixtureBackend:
    """A ``Backend`` answering answer requests with ``grounded_draft``; it never embeds."""

    name = ANSWER_SOURCE

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: type[BaseModel] | None,
        structured: bool,
        max_tokens: int | None,
        timeout_s: float | None = None,
    ) -> Completion:
        if schema is not AnswerDraft:
            raise ProviderResponseInvalid(f"fixture answerer: answers AnswerDraft requests only, not {schema}")
        question, blocks = context_blocks(str(messages[-1]["content"]))
        text = grounded_draft(question, blocks).model_dump_json()
        prompt_chars = sum(len(str(m["content"])) for m in messages)
        return Completion(
            text=text,
            reported_model=REPORTED_MODEL,
            usage=TokenUsage.from_characters(prompt_chars, len(text), 0),
            provider=self.name,
        )

    def embed(self, texts: list[str], *, input_mode: str | None = None) -> Embeddings:
        raise ProviderResponseInvalid("fixture answerer: does not embed")


def parse_draft(text: str) -> AnswerDraft:
    """An answer entry's text as the structured answer (for checks and tests)."""
    return AnswerDraft.model_validate(json.loads(text))
