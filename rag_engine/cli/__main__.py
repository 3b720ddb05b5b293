from rag_engine.cli.app import run

run()
