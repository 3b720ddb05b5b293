"""The one way the project reads YAML: safe, and a repeated mapping key is an error.

PyYAML's ``safe_load`` keeps the last of two equal keys, so a front matter with two
``collection:`` lines, or a config listing a role twice, silently means something other than
what a reviewer reads (a repeated ``collection:`` published an internal document). Every YAML
the project reads (engine config, pricing, pack manifests, golden files, front matter) goes
through ``load``, which refuses duplicates with ``source:line``.

``DuplicateKeyError`` is a ``yaml.YAMLError``, so callers that already turn YAML errors into
their own typed errors (ConfigError, PackError, EvalInputError) need no extra branch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError

__all__ = ["DuplicateKeyError", "load", "load_file"]

_MERGE_TAG = "tag:yaml.org,2002:merge"


class DuplicateKeyError(ConstructorError):
    """A mapping repeats a key; names the source, the line of the repeat and of the first one."""

    def __init__(self, source: str, key: Any, line: int, first_line: int, mark: yaml.Mark):
        super().__init__(problem=f"duplicate key {key!r} (first at line {first_line})", problem_mark=mark)
        self.source, self.key, self.line, self.first_line = source, key, line, first_line

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: duplicate key {self.key!r} (first at line {self.first_line})"


class _StrictLoader(yaml.SafeLoader):
    source = "<yaml>"
    line_offset = 0

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        # explicit keys only: a key that overrides one brought in by a `<<` merge is legal YAML
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # the base constructor reports unhashable keys itself
            line = key_node.start_mark.line + 1 + self.line_offset
            if key in seen:
                raise DuplicateKeyError(self.source, key, line, seen[key], key_node.start_mark)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load(text: str, *, source: str | Path = "<yaml>", first_line: int = 1) -> Any:
    """Parse one YAML document like ``yaml.safe_load``, refusing repeated keys.

    ``first_line`` is the file line the text starts at (front matter starts at line 2), so
    reported lines are the file's own.
    """
    loader = _StrictLoader(text)
    loader.source = str(source)
    loader.line_offset = first_line - 1
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def load_file(path: str | Path) -> Any:
    path = Path(path)
    return load(path.read_text(encoding="utf-8"), source=path)
