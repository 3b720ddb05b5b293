"""Replay provider: answers from a recorded JSONL cassette, so demos and CI run offline and deterministically
(priced, when its provider has a ``local_cost``, as the machine time of the local model it stands for).

Entries are keyed by a hash of what determines the answer (operation, served model, messages or
inputs, output schema), never by anything secret. A miss is a typed error naming the hash, not
the prompt: prompts may hold customer text. In record mode a miss is forwarded to a live
provider and the answer appended, labelled with where it came from.
"""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rag_engine.errors import ProviderResponseInvalid, ReplayMiss
from rag_engine.providers.registry import ModelSpec
from rag_engine.providers.results import Backend, Completion, Embeddings, TokenUsage

try:  # serialise appends from several processes where the platform allows it
    import fcntl
except ImportError:  # pragma: no cover - non-POSIX
    fcntl = None  # type: ignore[assignment]

CHAT = "chat.completions"
EMBEDDINGS = "embeddings"


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def schema_fingerprint(schema: type[BaseModel] | None) -> dict[str, Any] | None:
    return None if schema is None else {"name": schema.__name__, "json_schema": schema.model_json_schema()}


def generation_key(served_model: str, messages: list[dict[str, Any]], schema: type[BaseModel] | None) -> str:
    payload = {
        "operation": CHAT,
        "served_model": served_model,
        "messages": messages,
        "schema": schema_fingerprint(schema),
    }
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()


def embedding_key(served_model: str, texts: list[str], input_mode: str | None = None) -> str:
    payload: dict[str, Any] = {"operation": EMBEDDINGS, "served_model": served_model, "input": list(texts)}
    if input_mode is not None:  # asymmetric embedders answer differently per mode (absent: old keys hold)
        payload["input_mode"] = input_mode
    return hashlib.sha256(_canonical(payload).encode()).hexdigest()


class Cassette:
    """A JSONL file of recorded answers, loaded once; appends go to memory and disk together."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._entries: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            for number, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), start=1):
                if not line.strip():
                    continue
                try:
                    entry = json.loads(line)
                    self._entries[entry["key"]] = entry
                except (ValueError, KeyError, TypeError):
                    raise ProviderResponseInvalid(
                        f"cassette {self.path.name}: line {number} is not a valid entry"
                    ) from None

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> dict[str, Any] | None:
        return self._entries.get(key)

    def append(self, entry: dict[str, Any]) -> None:
        line = _canonical(entry) + "\n"
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as fh:
                if fcntl is not None:
                    fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
                fh.write(line)
                fh.flush()
            self._entries[entry["key"]] = entry

    # -- entry builders (record mode and hand-written fixtures use the same shape) ----
    def put_generation(
        self,
        served_model: str,
        messages: list[dict[str, Any]],
        text: str,
        *,
        schema: type[BaseModel] | None = None,
        reported_model: str | None = None,
        usage: TokenUsage | None = None,
        source: str = "handwritten",
    ) -> str:
        key = generation_key(served_model, messages, schema)
        try:
            parsed = json.loads(text) if schema is not None else None
        except ValueError:
            parsed = None
        self.append(_entry(key, CHAT, served_model, reported_model, usage, source, {"text": text, "parsed": parsed}))
        return key

    def put_embedding(
        self,
        served_model: str,
        texts: list[str],
        vectors: list[list[float]],
        *,
        reported_model: str | None = None,
        usage: TokenUsage | None = None,
        source: str = "handwritten",
        input_mode: str | None = None,
    ) -> str:
        key = embedding_key(served_model, texts, input_mode)
        self.append(_entry(key, EMBEDDINGS, served_model, reported_model, usage, source, {"vectors": vectors}))
        return key


def _entry(
    key: str,
    operation: str,
    served_model: str,
    reported_model: str | None,
    usage: TokenUsage | None,
    source: str,
    response: dict[str, Any],
) -> dict[str, Any]:
    return {
        "key": key,
        "operation": operation,
        "served_model": served_model,
        "reported_model": reported_model,
        "usage": (usage or TokenUsage()).model_dump(),  # none given: neither reported nor estimated
        "response": response,
        "fixture": True,  # a recorded or hand-written answer, not a live one
        "source": source,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


class ReplayBackend:
    """Answers from the cassette; with ``live`` set (record mode) misses are recorded from it."""

    def __init__(
        self, spec: ModelSpec, cassette: Cassette, *, live: Backend | None = None, record_source: str | None = None
    ):
        self._spec = spec
        self._cassette = cassette
        self._live = live
        self._record_source = record_source  # the recorded entries' source; default recorded:<provider>

    def __repr__(self) -> str:
        mode = f"record from {self._live.name}" if self._live else "replay"
        return f"ReplayBackend({self._spec.identity}, {mode}, {len(self._cassette)} entries)"

    @property
    def name(self) -> str:
        return self._spec.provider.name

    def _miss(self, key: str, operation: str) -> ReplayMiss:
        return ReplayMiss(
            f"replay provider {self.name!r}: no recorded answer for request {key} "
            f"({operation}, model {self._spec.model.served_model}) in cassette {self._cassette.path.name} "
            f"({len(self._cassette)} entries); record it with record: true and record_provider"
        )

    def _usage(self, entry: dict[str, Any], key: str) -> TokenUsage:
        try:
            return TokenUsage.model_validate(entry.get("usage") or {})
        except ValidationError:
            raise ProviderResponseInvalid(f"cassette entry {key} has malformed usage") from None

    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        schema: type[BaseModel] | None,
        structured: bool,
        max_tokens: int | None,
        timeout_s: float | None = None,
    ) -> Completion:
        served = self._spec.model.served_model
        key = generation_key(served, messages, schema)
        entry = self._cassette.get(key)
        if entry is None:
            if self._live is None:
                raise self._miss(key, CHAT)
            answer = self._live.complete(
                messages, schema=schema, structured=structured, max_tokens=max_tokens, timeout_s=timeout_s
            )
            self._cassette.put_generation(
                served,
                messages,
                answer.text,
                schema=schema,
                reported_model=answer.reported_model,
                usage=answer.usage,
                source=self._record_source or f"recorded:{answer.provider}",
            )
            return answer
        response = entry.get("response") or {}
        if entry.get("operation") != CHAT or not isinstance(response.get("text"), str):
            raise ProviderResponseInvalid(f"cassette entry {key} is not a chat completion")
        return Completion(
            text=response["text"],
            reported_model=entry.get("reported_model"),
            usage=self._usage(entry, key),
            provider=self.name,
        )

    def embed(self, texts: list[str], *, input_mode: str | None = None) -> Embeddings:
        served = self._spec.model.served_model
        key = embedding_key(served, texts, input_mode)
        entry = self._cassette.get(key)
        if entry is None:
            if self._live is None:
                raise self._miss(key, EMBEDDINGS)
            answer = self._live.embed(texts, input_mode=input_mode)
            self._cassette.put_embedding(
                served,
                texts,
                answer.vectors,
                reported_model=answer.reported_model,
                usage=answer.usage,
                source=self._record_source or f"recorded:{answer.provider}",
                input_mode=input_mode,
            )
            return answer
        vectors = (entry.get("response") or {}).get("vectors")
        if entry.get("operation") != EMBEDDINGS or not isinstance(vectors, list) or len(vectors) != len(texts):
            raise ProviderResponseInvalid(f"cassette entry {key} is not an embedding of {len(texts)} texts")
        return Embeddings(
            vectors=vectors,
            reported_model=entry.get("reported_model"),
            usage=self._usage(entry, key),
            provider=self.name,
        )
