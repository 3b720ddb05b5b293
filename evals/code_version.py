"""The eval report's code version: what the eval measures besides the data.

A change of the default generation model, of the embedder or of a prompt (the answer
instructions, each enabled pack's extraction prompt) changes this version, so the ``eval_report``
asset goes stale and the gate then judges a fresh report (``python -m evals.gates``: a candidate
run with another configured generation model than the config names is refused).
"""

from __future__ import annotations

import hashlib

from rag_engine.config import slice_hash
from rag_engine.engine import Engine


def answer_prompt_hash() -> str:
    """sha256 (16 hex) of the answer's system prompt, instructions and structured answer schema."""
    from rag_engine.retrieval.answer import INSTRUCTIONS, AnswerDraft
    from rag_engine.retrieval.query import SYSTEM_PROMPT

    payload = SYSTEM_PROMPT + INSTRUCTIONS + repr(sorted(AnswerDraft.model_json_schema().items()))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def eval_code_version(engine: Engine) -> str:
    """Default generation model identity + embedder identity and dimension + prompt hashes +
    golden files (12 hex): the ``eval_report`` asset's code version, so a change makes it stale
    and a model change cannot skip an eval (and its blocking gate)."""
    from rag_engine.graph.extraction import prompt_hash

    emb = engine.registry.embedding
    prompts = {name: prompt_hash(pack.manifest) for name, pack in sorted(engine.packs.items())}
    return slice_hash(
        "eval-v2",
        engine.registry.generation.identity,
        emb.identity,
        emb.model.dimension,
        answer_prompt_hash(),
        prompts,
        engine.cfg.evals.golden,
    )
