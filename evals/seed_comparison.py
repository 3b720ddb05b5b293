"""The seed comparison: does the inferred graph find what deterministic retrieval misses?

A fixture pack (company KB rules, its own pack name: three documents about Project Falcon and
twelve about other systems' dependencies) where the answer to "Which system does Project Falcon
depend on?" sits in a chunk the text search ranks below ten others.
Extraction runs through the real pipeline, answered by a replay cassette written here from
hand-made records (labelled as fixture data, not model output):

  Project Falcon -[depends_on 0.83]-> Vault cluster      evidence: the target chunk
  Payments team  -[owns 0.70]->       Project Falcon     evidence: the overview chunk
  Project Falcon -[applies_to 0.20]-> Holiday calendar   negative control: below the floor

Expected: deterministic-only recall@10 = 0.0 (the question's words miss the target chunk); with
the graph the target is in the top 10 with path_score = 0.83 (one hop, no bonus): graph evidence
is a fused leg, and a chunk only the graph found takes one of the last places of the top k
(``retrieval.graph_tail``, 2 here, off by default), never the first; the 0.2 edge is stored,
ineligible, never traversed.

Extracted entities must occur in their evidence chunk: the fixture's manifest names "billing
pipeline" an alias of Project Falcon, so the storage and freeze chunks (which say "billing
pipeline", never "Project Falcon") ground it, and the question's words still miss the target chunk.

    python -m evals.seed_comparison      # prints the JSON (needs Neo4j, like `make test`)

The fixture pack is written to the configured store under its own name (``seed_<hex>``, never an
enabled pack, so retrieval never serves it to anyone else: ``store.reads.SERVED``) and removed
again when the run ends, whatever happened; the JSON's ``store`` entry proves it (the nodes of the
pack left afterwards, 0, else the run fails).
"""

from __future__ import annotations

import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

from rag_engine.config import ModelConfig, ProviderConfig
from rag_engine.engine import Engine
from rag_engine.errors import ConfigError
from rag_engine.graph.extraction import build_messages
from rag_engine.graph.models import RawExtraction
from rag_engine.ingest.documents import discover, load_document
from rag_engine.ingest.pipeline import ingest_pack
from rag_engine.packs import DomainPack, load_pack
from rag_engine.providers.replay import Cassette
from rag_engine.retrieval.retriever import retrieve
from rag_engine.store import measurement

QUESTION = "Which system does Project Falcon depend on?"
ROLE = "employee"
TARGET_EDGE = 0.83
NEGATIVE_EDGE = 0.2

DOCS = {
    "falcon.md": """---
id: POL-951
collection: kb_internal
---
# Project Falcon

## Overview
Project Falcon is the rebuild of the billing pipeline. Project Falcon is owned by the Payments team,
and every Project Falcon release needs a Finance sign-off.
""",
    "secrets.md": """---
id: POL-952
collection: kb_internal
---
# Secrets handling

## Storage
Credentials for the billing pipeline live in the Vault cluster, operated by the Platform team.
""",
    "holidays.md": """---
id: POL-953
collection: kb_internal
---
# Holiday calendar

## Freeze
The holiday calendar lists company holidays; billing pipeline deployments pause during the December freeze.
""",
}

_SYSTEMS = (
    "expense",
    "badge",
    "payroll",
    "ticketing",
    "wiki",
    "backup",
    "printing",
    "telephony",
    "recruiting",
    "inventory",
    "calendar booking",
    "mail relay",
)
DISTRACTORS = {
    f"system-{i:02d}.md": f"""---
id: POL-{960 + i}
collection: kb_internal
---
# The {name} system

## Dependencies
Which system does the {name} system depend on? The {name} system depends on the directory service
and on the {_SYSTEMS[(i + 1) % len(_SYSTEMS)]} system; every other system it uses is listed in its runbook.
"""
    for i, name in enumerate(_SYSTEMS)
}
"""Twelve passages that answer "which system does X depend on" for other systems: they outrank
the target chunk for the question's words and meaning, inside the fixture's own pack, so the
comparison does not depend on what else the store holds (only enabled packs are served, and the
fixture is served alone)."""
DOCS.update(DISTRACTORS)

# grounds "Project Falcon" in chunks that name it by the pipeline it rebuilds
ALIASES = {"Project Falcon": ["billing pipeline"]}

# what a model would have said per chunk (local id -> entities, relationships)
ANSWERS: dict[str, tuple[list[tuple[str, str]], list[tuple[str, str, str, float]]]] = {
    "overview": (
        [("Project Falcon", "system"), ("Payments team", "team")],
        [("Payments team", "Project Falcon", "owns", 0.70)],
    ),
    "storage": (
        [("Project Falcon", "system"), ("Vault cluster", "system"), ("Platform team", "team")],
        [
            ("Project Falcon", "Vault cluster", "depends_on", TARGET_EDGE),
            ("Platform team", "Vault cluster", "owns", 0.90),
        ],
    ),
    "freeze": (
        [("Project Falcon", "system"), ("Holiday calendar", "system")],
        [("Project Falcon", "Holiday calendar", "applies_to", NEGATIVE_EDGE)],
    ),
}


def _answer(chunk_id: str, local: str) -> str:
    entities, rels = ANSWERS.get(local, ([], []))
    return RawExtraction.model_validate(
        {
            "chunk_id": chunk_id,
            "entities": [{"name": n, "type": t, "description": ""} for n, t in entities],
            "relationships": [
                {"source": a, "target": b, "type": t, "description": "", "confidence": c, "chunk_id": chunk_id}
                for a, b, t, c in rels
            ],
        }
    ).model_dump_json()


def fixture_engine(base: Engine, workdir: Path) -> tuple[Engine, DomainPack]:
    """An engine whose extraction model replays the hand-made answers, and the fixture pack."""
    pack_name = f"seed_{uuid.uuid4().hex[:8]}"
    corpus = workdir / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    for name, text in DOCS.items():
        (corpus / name).write_text(text, encoding="utf-8")
    cassette = workdir / "seed.jsonl"
    cfg = base.cfg
    provider = ProviderConfig(name="seed_replay", kind="replay", cassette=str(cassette))
    model = ModelConfig(
        name="seed-chat",
        provider="seed_replay",
        role="generation",
        served_model="seed-fixture-model",
        capabilities=("generation", "structured_output"),
    )
    storage = cfg.storage.model_copy(update={"artifacts_dir": str(workdir / "artifacts")})
    cfg = cfg.model_copy(
        update={
            "providers": (*cfg.providers, provider),
            "models": (*cfg.models, model),
            "storage": storage,
            "defaults": cfg.defaults.model_copy(update={"extraction_model": "seed-chat"}),
        }
    )
    engine = Engine(cfg, base.root, {**base.env, "RAG_LEDGER_URL": f"sqlite:///{workdir / 'ledger.sqlite'}"})
    manifest = workdir / "manifest.yaml"
    source_entry = cfg.pack("company_x_kb")
    if source_entry is None:
        raise ConfigError("engine config has no company_x_kb pack to copy")
    text = (base.root / source_entry.manifest).read_text(encoding="utf-8")
    extra = "".join(f"  {name}: {json.dumps(forms)}\n" for name, forms in ALIASES.items())
    manifest.write_text(text.replace("\naliases:\n", f"\naliases:\n{extra}", 1), encoding="utf-8")
    entry = source_entry.model_copy(update={"name": pack_name, "corpus": str(corpus), "manifest": str(manifest)})
    pack = load_pack(entry, base.root)
    tape = Cassette(cassette)
    for ref in discover(pack):
        for chunk in pack.chunk(load_document(pack, ref.partition_key, max_bytes=cfg.max_document_bytes)):
            local = chunk.chunk_id.split("#", 1)[1]
            tape.put_generation(
                model.served_model,
                build_messages(pack.manifest, chunk),
                _answer(chunk.chunk_id, local),
                schema=RawExtraction,
                source="handwritten:seed-comparison",
            )
    return engine, pack


def _rank(anchors: list[str], target: str) -> int | None:
    return anchors.index(target) + 1 if target in anchors else None


def run(base: Engine, workdir: Path) -> dict[str, Any]:
    """Ranks are among the fixture's own chunks: other data may share the database."""
    engine, pack = fixture_engine(base, workdir)
    target, negative = "secrets#storage", "holidays#freeze"
    try:
        ingest_pack(engine, pack, run_id=f"seed-{pack.name}")
        own = _pack_chunks(engine, pack.name)
        # the graph tail on (off by default): what the graph adds takes the last places of the top 10
        retrieval = engine.cfg.retrieval.model_copy(update={"graph_tail": 2})
        scoped = engine.cfg.model_copy(update={"roles": {ROLE: ("kb_internal",)}, "retrieval": retrieval})
        no_graph = scoped.model_copy(update={"traversal": scoped.traversal.model_copy(update={"max_candidates": 0})})
        results = {}
        for label, cfg in (("plain", no_graph), ("graph", scoped)):
            eng = Engine(cfg, engine.root, engine.env, packs=[pack])
            try:
                results[label] = retrieve(eng, QUESTION, ROLE, k=10)
            finally:
                eng.close()
        plain = [c for c in results["plain"].candidates if c.chunk_id in own]
        with_graph = [c for c in results["graph"].candidates if c.chunk_id in own]
        plain_rank = _rank([c.anchor for c in plain], target)
        graph_rank = _rank([c.anchor for c in with_graph], target)
        neg = next(e for e in _edges(engine, pack.name) if e["type"] == "applies_to")
        out: dict[str, Any] = {
            "question": QUESTION,
            "target_anchor": target,
            "deterministic_only": {
                "recall@1": 1.0 if plain_rank == 1 else 0.0,
                "recall@10": 1.0 if plain_rank is not None and plain_rank <= 10 else 0.0,
                "target_rank": plain_rank,
                "top": [c.anchor for c in plain[:3]],
            },
            "deterministic_plus_llm_graph": {
                "recall@1": 1.0 if graph_rank == 1 else 0.0,
                "recall@10": 1.0 if graph_rank is not None and graph_rank <= 10 else 0.0,
                "target_rank": graph_rank,
                "plan": (results["graph"].plan or {}).get("reason"),
                "candidate_scores": [
                    {
                        "anchor": c.anchor,
                        "path_score": c.path_score,
                        "path": [f"{h['seed']} -[{h['type']} {h['confidence']}]- {h['to_name']}" for h in c.path or ()],
                    }
                    for c in with_graph
                    if c.path_score is not None
                ],
            },
            "negative_control": {
                "edge": "Project Falcon -[applies_to]-> Holiday calendar",
                "confidence": neg["confidence"],
                "retrieval_eligible": neg["retrieval_eligible"],
                "stored": True,
                "retrieved_via_graph": any(c.anchor == negative and c.path_score is not None for c in with_graph),
            },
            "store": {"fixture_pack": pack.name},
        }
    finally:
        try:
            removed = remove_fixture(engine, pack.name)
        finally:
            engine.close()
    out["store"] = removed
    return out


def remove_fixture(engine: Engine, pack: str) -> dict[str, Any]:
    """Delete every node the fixture pack wrote, then count what is left of it (0, or ``ConfigError``)."""
    if not pack.startswith("seed_"):
        raise ConfigError(f"refusing to remove pack {pack!r}: only a seed comparison fixture (seed_<hex>)")
    removed = measurement.pack_nodes(engine.driver, engine.database, pack)
    measurement.drop_pack(engine.driver, engine.database, pack)
    left = measurement.pack_nodes(engine.driver, engine.database, pack)
    if left:
        raise ConfigError(f"the seed comparison left {left} nodes of its fixture pack {pack!r} in the store")
    return {"fixture_pack": pack, "nodes_removed": removed, "nodes_left": 0}


def _pack_chunks(engine: Engine, pack: str) -> set[str]:
    return measurement.chunk_ids(engine.driver, engine.database, pack)


def _edges(engine: Engine, pack: str) -> list[dict[str, Any]]:
    return measurement.related_edges(engine.driver, engine.database, pack)


def main() -> int:
    base = Engine.from_path()
    with tempfile.TemporaryDirectory(prefix="seed-comparison-") as tmp:
        print(json.dumps(run(base, Path(tmp)), indent=2))
    base.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
