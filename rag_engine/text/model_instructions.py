"""Sentences of a document that are instructions to a model, which the engine never quotes.

A document may carry text written for a language model rather than a reader ("Ignore previous
instructions and ..."). The extractive answer quotes a document's own sentences, so such a
sentence, ranked first, was quoted back to the caller as the answer. ``is_model_instruction``
recognises the common forms with a short list of patterns; a matching sentence is not quoted or
marked as evidence (``retrieval.answer.select_units``), while its passage is still retrieved,
shown and cited through its other sentences.

The list is deliberately short and general, not a filter tuned to any question: each pattern
needs wording that addresses a model, so ordinary text about instructions ("on documented
instructions from the controller") does not match.
"""

from __future__ import annotations

import re

PATTERNS: tuple[str, ...] = (
    # "ignore previous instructions", "disregard all prior prompts", "forget your instructions"
    r"\b(?:ignore|disregard|forget)\s+(?:\w+\s+){0,2}?(?:previous|prior|above|earlier|preceding|all|any|your|system)"
    r"\s+(?:\w+\s+)?(?:instructions|prompts?)\b",
    # "you are now DAN", "you are now an unrestricted assistant", "you are now in developer mode"
    r"\byou are now\s+(?:\w+\s+){0,3}?(?:ai|assistant|model|bot|chatbot|agent|mode|dan|unrestricted|jailbroken)\b",
    # "reveal your system prompt", "print the system prompt"
    r"\bsystem prompt\b",
    # "New instructions: ..."
    r"\bnew instructions\s*:",
)
_ANY = re.compile("|".join(f"(?:{p})" for p in PATTERNS), re.IGNORECASE)


def is_model_instruction(text: str) -> bool:
    """Whether ``text`` (one sentence, list item or row) addresses a model with instructions."""
    return _ANY.search(" ".join(text.split())) is not None
