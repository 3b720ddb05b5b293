"""Entity resolution by normalized name and pack aliases, so re-runs and different chunks
that mention "the supervisory authorities" and "Supervisory Authority" meet in one node."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping

_PUNCT = re.compile(r"[^\w\s-]+")
_SPACE = re.compile(r"\s+")
_ARTICLE = re.compile(r"^(the|a|an)\s+")


def _singular(word: str) -> str:
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def normalize_name(name: str) -> str:
    text = unicodedata.normalize("NFKC", name).lower().strip()
    text = _PUNCT.sub(" ", text)
    text = _SPACE.sub(" ", text).strip()
    text = _ARTICLE.sub("", text)
    if not text:
        return ""
    words = text.split(" ")
    words[-1] = _singular(words[-1])
    return " ".join(words)


class EntityResolver:
    """Maps surface names to canonical normalized names using the pack's alias table."""

    def __init__(self, pack_name: str, aliases: Mapping[str, tuple[str, ...]]):
        self.pack_name = pack_name
        self._canonical: dict[str, str] = {}
        self._forms: dict[str, list[str]] = {}
        for canonical, names in aliases.items():
            target = normalize_name(canonical)
            for alias in (canonical, *names):
                self._canonical[normalize_name(alias)] = target
                self._forms.setdefault(target, []).append(alias)

    def surface_forms(self, name: str) -> list[str]:
        """The name itself and every pack alias of the entity it resolves to."""
        return [name, *self._forms.get(self.resolve(name), [])]

    def resolve(self, name: str) -> str:
        norm = normalize_name(name)
        return self._canonical.get(norm, norm)

    def entity_id(self, normalized: str) -> str:
        return hashlib.sha256(f"{self.pack_name}|{normalized}".encode()).hexdigest()[:20]
