"""The conversation a query may carry: typed turns, bounded, checked once for every route.

A caller (the Python API, ``POST /v1/query``, the MCP ``ask`` tool, `rag query --history FILE`)
may pass the earlier turns of a chat as a list of ``{"role": "user" | "assistant", "content": text}``.
``turns`` checks them before anything runs: a turn of another shape or role, an empty or overlong
content, or more turns than ``context.max_turns`` is a ``QueryInputError`` naming the turn (never
its text). What the answer model then sees is decided by the context assembler's
``conversation`` budget (the most recent turns that fit; the others are listed in the overflow).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rag_engine.config import ContextBudgetsConfig
from rag_engine.errors import QueryInputError


class Turn(BaseModel):
    """One earlier turn of the conversation."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    role: Literal["user", "assistant"]
    content: str = Field(min_length=1)


def turns(raw: object, limits: ContextBudgetsConfig) -> list[Turn]:
    """The turns of ``raw`` (a list of turns or dicts, or None), checked (module docstring); ``[]`` for none."""
    if raw is None:
        return []
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
        raise QueryInputError("conversation must be a list of turns {role, content}")
    if len(raw) > limits.max_turns:
        raise QueryInputError(f"conversation has {len(raw)} turns; at most {limits.max_turns} (context.max_turns)")
    out: list[Turn] = []
    for i, item in enumerate(raw):
        try:
            turn = item if isinstance(item, Turn) else Turn.model_validate(item)
        except ValidationError as exc:
            where = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'turn'}: {e['msg']}" for e in exc.errors())
            raise QueryInputError(
                f"conversation[{i}] is not a turn {{role: user|assistant, content}} ({where})"
            ) from None
        if len(turn.content) > limits.max_turn_chars:
            raise QueryInputError(
                f"conversation[{i}] has {len(turn.content)} characters; at most {limits.max_turn_chars} "
                "(context.max_turn_chars)"
            )
        out.append(turn)
    return out


def from_file(path: Path, limits: ContextBudgetsConfig) -> list[Turn]:
    """The turns of a JSON file holding a list of turns (`rag query --history FILE`), checked like
    any other; an unreadable, oversized or malformed file is a ``QueryInputError``."""
    most = limits.max_turns * (limits.max_turn_chars * 6 + 64) + 2  # JSON escapes make up to 6 bytes a character
    try:
        size = path.stat().st_size
        if size > most:
            raise QueryInputError(
                f"--history {path.name}: {size} bytes; at most {most} (context.max_turns, max_turn_chars)"
            )
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise QueryInputError(f"--history {path.name}: cannot read it ({type(exc).__name__})") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise QueryInputError(f"--history {path.name}: not UTF-8 JSON ({type(exc).__name__})") from None
    if not isinstance(raw, list):
        raise QueryInputError(f"--history {path.name}: must hold a JSON list of turns {{role, content}}")
    return turns(raw, limits)
