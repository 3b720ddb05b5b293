"""Graph records: what the LLM may say (raw) and what we store (validated, with provenance).

Raw models are deliberately loose (any type string, any confidence number) so one bad record
is rejected with a counted reason instead of failing the whole chunk's output. Stored models
are frozen and complete: nothing reaches Neo4j without full provenance.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SourceType = Literal["deterministic_reference", "llm_inferred_graph"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- what the model is asked to return (structured output schema) ----------------------------


class RawEntity(BaseModel):
    name: str
    type: str
    description: str


class RawRelationship(BaseModel):
    source: str
    target: str
    type: str
    description: str
    confidence: float


class RawExtraction(BaseModel):
    """The schema sent to the model; every field required (strict structured output).

    No chunk id: the engine knows which chunk it asked about and sets provenance itself. An
    answer that still carries ``chunk_id`` fields (an older prompt, a chatty model) is accepted and
    those fields are ignored (pydantic drops unknown keys): a model cannot place a record on
    another chunk by naming it."""

    entities: list[RawEntity]
    relationships: list[RawRelationship]


# -- what we store ---------------------------------------------------------------------------


class Provenance(_Frozen):
    doc_id: str
    chunk_id: str
    doc_version: str
    confidence_bucket: str
    extraction_run_id: str
    model: str
    prompt_hash: str
    source_type: SourceType = "llm_inferred_graph"


class GraphEntity(_Frozen):
    entity_id: str
    name: str
    normalized_name: str
    type: str
    description: str = ""
    provenance: Provenance


class GraphRelationship(_Frozen):
    source_id: str
    target_id: str
    type: str
    description: str = ""
    confidence: float = Field(ge=0.0, le=1.0)
    retrieval_eligible: bool
    provenance: Provenance


class ValidatedExtraction(_Frozen):
    chunk_id: str
    entities: tuple[GraphEntity, ...]
    relationships: tuple[GraphRelationship, ...]
    rejected: dict[str, int] = {}
