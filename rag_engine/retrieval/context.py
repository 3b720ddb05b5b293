"""Typed context assembler: what the answer model is allowed to see, under per-category budgets.

Four categories (system, documents, conversation, tools) each get their own token budget from
``ContextBudgetsConfig`` so a long chat history can never crowd out the evidence, nor evidence
crowd out the instructions. Everything that does not fit is listed in ``overflow`` with its
category and a reason: nothing is dropped silently, so a trace can say *why* a chunk the
retriever found was not shown to the model.

Token counting is approximate on purpose: ``approx_tokens`` = ceil(characters / 4), the usual
rule of thumb for English BPE vocabularies. It is deterministic and needs no tokenizer
download; budgets are a guard rail, not an exact fit to one model's tokenizer. Pass another
``count_tokens`` for an exact count.

Documents are taken in candidate order, whole chunks only: a chunk is never cut mid-text,
because a truncated chunk could lose the very sentence a citation points at. A chunk that
does not fit the remaining budget goes to overflow and later (smaller) candidates may still
fit (first fit in rank order). Conversation keeps the most recent turns: walking back from the
newest message, the first one that does not fit sends it and every older one to overflow, so
the kept history has no gaps.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field

from rag_engine.config import ContextBudgetsConfig
from rag_engine.retrieval.candidates import Candidate
from rag_engine.retrieval.live_rows import LiveProvenance
from rag_engine.text.token_count import estimated_tokens

Category = Literal["system", "documents", "conversation", "tools"]
OverflowReason = Literal["over_budget", "duplicate_chunk", "older_than_dropped_turn"]
CATEGORIES: tuple[Category, ...] = ("system", "documents", "conversation", "tools")
TOKEN_COUNTER = "approx_chars_div_4"


def approx_tokens(text: str) -> int:
    """ceil(len(text) / 4) (``text.token_count``'s estimate): deterministic, tokenizer-free,
    slightly pessimistic for English."""
    return estimated_tokens(len(text))


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SystemItem(_Frozen):
    text: str
    tokens: int


class DocumentItem(_Frozen):
    """One chunk in context, with where it came from (sources, reference hop, graph path)."""

    number: int  # 1-based position among the documents in context: the block label [n]
    chunk_id: str
    anchor: str
    doc_id: str
    heading: str
    collection: str
    text: str
    sources: tuple[str, ...]
    doc_title: str = ""
    """The title of the chunk's document: evidence for the floor, not part of the prompt block."""
    exact: bool = False
    via: str | None = None
    path_score: float | None = None
    path: tuple[dict[str, Any], ...] | None = None
    provenance: LiveProvenance | None = None
    tokens: int
    units: tuple[Any, ...] = Field(default=(), exclude=True)
    """The candidate's sentence evidence (``sentence_evidence.UnitEvidence``), when scored."""


class MessageItem(_Frozen):
    index: int  # position in the conversation as given
    role: str
    content: str
    tokens: int


class ToolItem(_Frozen):
    index: int
    name: str
    spec: dict[str, Any]
    tokens: int


class OverflowItem(_Frozen):
    category: Category
    item_id: str  # chunk_id, "system", "conversation[i]" or "tools[i]:name"
    tokens: int
    reason: OverflowReason
    remaining: int  # budget left in the category when the item was considered


class AssembledContext(_Frozen):
    budgets: ContextBudgetsConfig
    token_counter: str
    system: tuple[SystemItem, ...]
    documents: tuple[DocumentItem, ...]
    conversation: tuple[MessageItem, ...]
    tools: tuple[ToolItem, ...]
    overflow: tuple[OverflowItem, ...]
    """Ordered by category (system, documents, conversation, tools), then by input order."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def used(self) -> dict[str, int]:
        return {
            "system": sum(i.tokens for i in self.system),
            "documents": sum(i.tokens for i in self.documents),
            "conversation": sum(i.tokens for i in self.conversation),
            "tools": sum(i.tokens for i in self.tools),
        }

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cited_ids(self) -> frozenset[str]:
        """The only chunk ids an answer may cite."""
        return frozenset(d.chunk_id for d in self.documents)

    @property
    def system_text(self) -> str:
        return "\n\n".join(i.text for i in self.system)


TEXT_FENCE = "> "
"""Every line of a block's text starts with this, so a document cannot write a line the prompt
reads as structure: a chunk holding ``[2] chunk_id=...#art-33 | GDPR Article 33`` and a
``Question:`` line forged a second block [2] and a second question before it was fenced."""


def render_document(number: int, c: Candidate | DocumentItem) -> str:
    """The block the model sees; its tokens are what the documents budget is charged. The header
    line is the engine's (ids are checked names, the heading one line); the text is fenced."""
    head = f"[{number}] chunk_id={c.chunk_id} doc={c.doc_id} anchor={c.anchor}"
    if c.provenance is not None:  # a live row: the model is told when it was committed, and if stale
        head += f" committed_at={c.provenance.committed_at.isoformat()}" + (" STALE" if c.provenance.stale else "")
    if c.heading:
        head += f" | {' '.join(c.heading.split())}"
    text = "\n".join(TEXT_FENCE + line for line in c.text.split("\n"))
    return f"{head}\n{text}"


def _documents(
    candidates: Sequence[Candidate], budget: int, count: Callable[[str], int]
) -> tuple[list[DocumentItem], list[OverflowItem]]:
    kept: list[DocumentItem] = []
    overflow: list[OverflowItem] = []
    seen: set[str] = set()
    remaining = budget
    for c in candidates:
        if c.chunk_id in seen:
            overflow.append(
                OverflowItem(
                    category="documents", item_id=c.chunk_id, tokens=0, reason="duplicate_chunk", remaining=remaining
                )
            )
            continue
        seen.add(c.chunk_id)
        tokens = count(render_document(len(kept) + 1, c))
        if tokens > remaining:
            overflow.append(
                OverflowItem(
                    category="documents", item_id=c.chunk_id, tokens=tokens, reason="over_budget", remaining=remaining
                )
            )
            continue
        remaining -= tokens
        kept.append(
            DocumentItem(
                number=len(kept) + 1,
                chunk_id=c.chunk_id,
                anchor=c.anchor,
                doc_id=c.doc_id,
                heading=c.heading,
                collection=c.collection,
                text=c.text,
                sources=c.sources,
                doc_title=c.doc_title,
                exact=c.exact,
                via=c.via,
                path_score=c.path_score,
                path=c.path,
                provenance=c.provenance,
                tokens=tokens,
                units=c.units,
            )
        )
    return kept, overflow


def _conversation(
    turns: Sequence[dict[str, Any]], budget: int, count: Callable[[str], int]
) -> tuple[list[MessageItem], list[OverflowItem]]:
    kept: list[MessageItem] = []
    overflow: list[OverflowItem] = []
    remaining = budget
    cut = False
    for index in range(len(turns) - 1, -1, -1):
        role, content = str(turns[index].get("role", "user")), str(turns[index].get("content", ""))
        tokens = count(f"{role}: {content}")
        if cut or tokens > remaining:
            reason: OverflowReason = "older_than_dropped_turn" if cut else "over_budget"
            overflow.append(
                OverflowItem(
                    category="conversation",
                    item_id=f"conversation[{index}]",
                    tokens=tokens,
                    reason=reason,
                    remaining=remaining,
                )
            )
            cut = True
            continue
        remaining -= tokens
        kept.append(MessageItem(index=index, role=role, content=content, tokens=tokens))
    return kept[::-1], overflow[::-1]


def _tools(
    tools: Sequence[dict[str, Any]], budget: int, count: Callable[[str], int]
) -> tuple[list[ToolItem], list[OverflowItem]]:
    kept: list[ToolItem] = []
    overflow: list[OverflowItem] = []
    remaining = budget
    for index, spec in enumerate(tools):
        name = str(spec.get("name") or spec.get("function", {}).get("name") or "")
        tokens = count(json.dumps(spec, sort_keys=True, default=str))
        if tokens > remaining:
            overflow.append(
                OverflowItem(
                    category="tools",
                    item_id=f"tools[{index}]:{name}",
                    tokens=tokens,
                    reason="over_budget",
                    remaining=remaining,
                )
            )
            continue
        remaining -= tokens
        kept.append(ToolItem(index=index, name=name, spec=dict(spec), tokens=tokens))
    return kept, overflow


def assemble_context(
    candidates: Sequence[Candidate],
    *,
    budgets: ContextBudgetsConfig,
    system_prompt: str,
    conversation: Sequence[dict[str, Any]] = (),
    tools: Sequence[dict[str, Any]] = (),
    count_tokens: Callable[[str], int] = approx_tokens,
) -> AssembledContext:
    """Fill each category up to its own budget; whatever does not fit is listed in ``overflow``."""
    system: list[SystemItem] = []
    overflow: list[OverflowItem] = []
    if system_prompt:
        tokens = count_tokens(system_prompt)
        if tokens <= budgets.system:
            system.append(SystemItem(text=system_prompt, tokens=tokens))
        else:
            overflow.append(
                OverflowItem(
                    category="system", item_id="system", tokens=tokens, reason="over_budget", remaining=budgets.system
                )
            )
    documents, doc_overflow = _documents(candidates, budgets.documents, count_tokens)
    turns, turn_overflow = _conversation(conversation, budgets.conversation, count_tokens)
    tool_items, tool_overflow = _tools(tools, budgets.tools, count_tokens)
    counter = TOKEN_COUNTER if count_tokens is approx_tokens else getattr(count_tokens, "__name__", "custom")
    return AssembledContext(
        budgets=budgets,
        token_counter=counter,
        system=tuple(system),
        documents=tuple(documents),
        conversation=tuple(turns),
        tools=tuple(tool_items),
        overflow=tuple(overflow + doc_overflow + turn_overflow + tool_overflow),
    )
