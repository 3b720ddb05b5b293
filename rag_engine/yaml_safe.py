"""The one way the project reads YAML: safe, and a repeated mapping key is an error.

PyYAML's ``safe_load`` keeps the last of two equal keys, so a front matter with two
``collection:`` lines, or a config listing a role twice, silently means something other than
what a reviewer reads (a repeated ``collection:`` published an internal document). Every YAML
the project reads (engine config, pricing, pack manifests, golden files, front matter) goes
through ``load``, which refuses duplicates with ``source:line``.

Documents are hostile input, so ``load`` also refuses what makes a few bytes cost minutes or a
crash: aliases (``*a``; a 547-byte front matter of nested aliases expanded to gigabytes when its
title was turned into a string), nesting deeper than ``MAX_DEPTH``, and scalars Python refuses
to build (a 5,000-digit integer). Trusted files that want anchors pass ``allow_aliases=True``.

Every refusal (``DuplicateKeyError``, ``UnsafeYamlError``) is a ``yaml.YAMLError``, so callers
that already turn YAML errors into their own typed errors (ConfigError, PackError,
EvalInputError) need no extra branch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.resolver import Resolver

try:  # libyaml's scanner and parser (C), when PyYAML was built with it
    from yaml._yaml import CParser

    LIBYAML = True
except ImportError:  # pragma: no cover - a PyYAML without libyaml reads with the pure-Python reader only
    LIBYAML = False

__all__ = ["MAX_DEPTH", "DuplicateKeyError", "UnsafeYamlError", "load", "load_file"]

_MERGE_TAG = "tag:yaml.org,2002:merge"
MAX_DEPTH = 64
"""Collections nested deeper than this are refused (no file the project reads comes close)."""


class UnsafeYamlError(yaml.YAMLError):
    """YAML refused before it is built: an alias, nesting too deep, a scalar Python cannot hold."""

    def __init__(self, source: str, line: int | None, problem: str):
        super().__init__(problem)
        self.source, self.line, self.problem = source, line, problem

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line is not None else self.source
        return f"{where}: {self.problem}"


class DuplicateKeyError(ConstructorError):
    """A mapping repeats a key; names the source, the line of the repeat and of the first one."""

    def __init__(self, source: str, key: Any, line: int, first_line: int, mark: yaml.Mark):
        super().__init__(problem=f"duplicate key {key!r} (first at line {first_line})", problem_mark=mark)
        self.source, self.key, self.line, self.first_line = source, key, line, first_line

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: duplicate key {self.key!r} (first at line {self.first_line})"


if TYPE_CHECKING:  # type-checked as the loader it is mixed into
    _StrictBase = yaml.SafeLoader
else:
    _StrictBase = object


class _Strict(_StrictBase):
    """The refusals, over any reader: PyYAML's Python composer calls ``compose_node`` for every
    node and its safe constructor ``construct_mapping`` for every mapping."""

    source = "<yaml>"
    line_offset = 0
    allow_aliases = False
    _depth = 0

    def _line(self, mark: yaml.Mark | None) -> int | None:
        return None if mark is None else mark.line + 1 + self.line_offset

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent) and not self.allow_aliases:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise UnsafeYamlError(
                self.source, self._line(event.start_mark), "YAML aliases (*name) are not accepted here"
            )
        if self.check_event(yaml.SequenceStartEvent, yaml.MappingStartEvent):
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    event = self.peek_event()  # type: ignore[no-untyped-call]
                    raise UnsafeYamlError(
                        self.source, self._line(event.start_mark), f"nested deeper than {MAX_DEPTH} levels"
                    )
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1
        return super().compose_node(parent, index)

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


class _StrictLoader(_Strict, yaml.SafeLoader):
    """The pure-Python reader (scanner, parser), composer and safe constructor."""


if LIBYAML:

    class _FastLoader(_Strict, Composer, CParser, SafeConstructor, Resolver):
        """libyaml's events (its C scanner and parser: config/engine.yaml in 3 ms instead of 30, paid
        by every process), composed and constructed by PyYAML's Python code, so every refusal of
        ``_Strict`` holds; the composer comes before the parser in the order, so its
        ``compose_node`` is the one called."""

        def __init__(self, stream: str):
            CParser.__init__(self, stream)
            Composer.__init__(self)
            SafeConstructor.__init__(self)
            Resolver.__init__(self)


def load(text: str, *, source: str | Path = "<yaml>", first_line: int = 1, allow_aliases: bool = False) -> Any:
    """Parse one YAML document like ``yaml.safe_load``, refusing repeated keys, aliases (unless
    ``allow_aliases``), deep nesting and scalars Python cannot build.

    ``first_line`` is the file line the text starts at (front matter starts at line 2), so
    reported lines are the file's own.

    Read with libyaml's reader when PyYAML has it; a document it does not accept is read again by
    the pure-Python reader, so every refusal says what it always said (libyaml words its own
    errors, and refuses deep nesting in its scanner before the depth check sees it).
    """
    if LIBYAML:
        try:
            return _read(_FastLoader, text, source, first_line, allow_aliases)
        except (UnsafeYamlError, DuplicateKeyError):
            raise
        except yaml.YAMLError:
            pass
    return _read(_StrictLoader, text, source, first_line, allow_aliases)


def _read(cls: Any, text: str, source: str | Path, first_line: int, allow_aliases: bool) -> Any:
    loader = cls(text)
    loader.source = str(source)
    loader.line_offset = first_line - 1
    loader.allow_aliases = allow_aliases
    try:
        return loader.get_single_data()
    except (ValueError, RecursionError, OverflowError) as exc:  # e.g. an integer past Python's digit limit
        if isinstance(exc, yaml.YAMLError):
            raise
        problem = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise UnsafeYamlError(str(source), None, f"a value cannot be read: {problem}") from None
    finally:
        loader.dispose()


def load_file(path: str | Path, *, allow_aliases: bool = False) -> Any:
    path = Path(path)
    return load(path.read_text(encoding="utf-8"), source=path, allow_aliases=allow_aliases)
