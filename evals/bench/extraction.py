"""Extraction tokens per chunk against the minimum, on one pack's corpus (default: GDPR).

Per chunk, counted the way the engine counts a call before it starts (``estimate_tokens``, ~4
characters a token): the prompt ``build_messages`` sends, plus the answer. The answer is the demo
cassette's heuristic answer for the chunk (evals/cassettes/heuristic_extractor.py) serialized with
the schema the model is asked for, a stand-in of the right shape. The minimum is a one-line
instruction, the chunk (heading and text) and the same answer without anything the engine
already knows. The JSON schema sent as the response format is the same for every call (a cached
prefix at the provider) and is not in the engine's estimate, so it is not counted here either.

    python -m evals.bench.extraction [--pack legal_regulatory] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics

from evals.cassettes.heuristic_extractor import heuristic_extraction
from rag_engine.engine import Engine
from rag_engine.graph.extraction import build_messages
from rag_engine.ingest.documents import discover, load_document
from rag_engine.providers.ratelimit import estimate_tokens

MINIMAL_INSTRUCTION = "Extract the entities and relationships this chunk states, as JSON."


def minimal_answer(answer: dict[str, object]) -> str:
    """The answer without chunk ids: the engine knows which chunk it asked about."""
    slim = {
        "entities": answer["entities"],
        "relationships": [
            {k: v for k, v in r.items() if k != "chunk_id"}
            for r in answer["relationships"]  # type: ignore[attr-defined]
        ],
    }
    return json.dumps(slim, ensure_ascii=False, separators=(",", ":"))


def measure(engine: Engine, pack_name: str) -> dict[str, str | float | int]:
    pack = engine.pack(pack_name)
    engine_tokens, minimum_tokens, prompt_tokens = [], [], []
    for ref in discover(pack):
        doc = load_document(pack, ref.partition_key, max_bytes=engine.cfg.max_document_bytes)
        for chunk in pack.chunk(doc):
            messages = build_messages(pack.manifest, chunk)
            prompt = estimate_tokens([str(m["content"]) for m in messages])
            raw = heuristic_extraction(pack.name, pack.manifest, chunk)
            answer = raw.model_dump(mode="json")
            sent = estimate_tokens([json.dumps(answer, ensure_ascii=False, separators=(",", ":"))])
            floor = estimate_tokens([MINIMAL_INSTRUCTION, f"{chunk.heading}\n{chunk.text}", minimal_answer(answer)])
            prompt_tokens.append(prompt)
            engine_tokens.append(prompt + sent)
            minimum_tokens.append(floor)
    total, floor = sum(engine_tokens), sum(minimum_tokens)
    return {
        "pack": pack_name,
        "chunks": len(engine_tokens),
        "tokens_per_chunk": round(total / len(engine_tokens), 1),
        "prompt_tokens_per_chunk": round(statistics.mean(prompt_tokens), 1),
        "minimum_per_chunk": round(floor / len(minimum_tokens), 1),
        "ratio": round(total / floor, 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pack", default="legal_regulatory")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    engine = Engine.from_path()
    result = measure(engine, args.pack)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"{result['pack']}: {result['chunks']} chunks, {result['tokens_per_chunk']} tokens per chunk "
        f"(prompt {result['prompt_tokens_per_chunk']}), minimum {result['minimum_per_chunk']}, "
        f"ratio {result['ratio']:.3f}x"
    )


if __name__ == "__main__":
    main()
