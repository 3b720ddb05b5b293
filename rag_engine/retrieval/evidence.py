"""The evidence floor: does one context block hold enough of what the question asks about?

Below ``retrieval.min_evidence_coverage`` the answer is "insufficient evidence" without a model
call. Coverage is the best share, over the context blocks, of the question's content **stems**
(``rag_engine.text.terms``: stopwords and the question frame out, Snowball stems) that the block
holds in its text, its heading or its document's title, so "When must the DPO be told" is
covered by "Inform the Data Protection Officer within 24 hours" under the heading "Security and
data breach incidents" of the "Incident response runbook":

- **stems**, so "notifying" meets "notified" and "tickets" meets "ticket";
- **aliases** of the permitted packs (``manifest.aliases``): a name and its aliases ("DPO",
  "Data Protection Officer") count as one term, found in a block by any of its forms;
- an exact reference hit covers the question by definition (the question named that passage).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rag_engine.retrieval.context import DocumentItem
from rag_engine.text.terms import content_stems, tokens


@dataclass(frozen=True)
class AliasGroups:
    """Each alias group (a canonical name and its aliases) as one placeholder word."""

    pattern: re.Pattern[str] | None
    group_of: Mapping[str, str]

    @classmethod
    def build(cls, aliases: Iterable[Mapping[str, Sequence[str]]]) -> AliasGroups:
        group_of: dict[str, str] = {}
        for index, table in enumerate(aliases):
            for n, (canonical, forms) in enumerate(sorted(table.items())):
                for form in (canonical, *forms):
                    phrase = " ".join(tokens(form))
                    if phrase:
                        group_of.setdefault(phrase, f"aliasgroup{index}n{n}")
        if not group_of:
            return cls(None, {})
        # longest forms first, word-bounded, so "data protection officer" wins over "officer"
        alternatives = "|".join(re.escape(p) for p in sorted(group_of, key=len, reverse=True))
        return cls(re.compile(rf"(?<![^\W_])(?:{alternatives})(?![^\W_])"), group_of)

    def fold(self, text: str) -> str:
        """``text`` as lowercased words with every alias form replaced by its group's word."""
        words = " ".join(tokens(text))
        if self.pattern is None:
            return words
        return self.pattern.sub(lambda m: self.group_of[m.group(0)], words)


def block_stems(doc: DocumentItem, aliases: AliasGroups) -> set[str]:
    return content_stems(aliases.fold(f"{doc.doc_title} {doc.heading} {doc.text}"))


def evidence_coverage(question: str, documents: Sequence[DocumentItem], aliases: AliasGroups) -> float:
    """Best share of the question's content stems found in one context block (1.0 for an
    exact hit, and for a question with no content word at all)."""
    terms = content_stems(aliases.fold(question))
    if not terms:
        return 1.0
    best = 0.0
    for doc in documents:
        if doc.exact:
            return 1.0
        best = max(best, len(terms & block_stems(doc, aliases)) / len(terms))
    return best
