"""RAG engine: the query path and offline building blocks. Never imports dagster.

This module stays import-free: the CLI reads ``DEFAULT_CONFIG`` before a command runs, and
``rag --help`` must not pay for the driver or the engine. It installs one import hook
(``_DriverWithoutPandas``): the Neo4j driver loads without pandas."""

import sys
from types import FrameType

DEFAULT_CONFIG = "config/engine.yaml"
"""The engine config file, relative to the project root (``--config`` / ``$RAG_CONFIG`` override it)."""


def package_version() -> str:
    """The installed rag-engine version ("unknown" outside an install): what `rag --version` prints
    and the query service reports. The import stays inside, so importing the package costs nothing."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rag-engine")
    except PackageNotFoundError:
        return "unknown"


class _DriverWithoutPandas:
    """Import hook: the Neo4j driver's optional pandas support (``neo4j._optional_deps`` imports
    pandas whenever it is installed, about 0.25 s) is refused, and only that import. The engine
    does not depend on pandas, hands the driver no pandas objects and reads no results as
    DataFrames; but an environment may hold pandas anyway (a virtualenv set up before pandas was
    dropped, another package's dependency), and the driver would import it into every process.
    Anything else imports pandas as usual; a process that imported pandas before the driver keeps
    the driver's pandas support (the import system never asks this hook then)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name != "pandas":
            return None
        frame: FrameType | None = sys._getframe(1)
        for _ in range(8):  # the importing module's frame sits a few importlib frames up
            if frame is None:
                break
            if frame.f_globals.get("__name__") == "neo4j._optional_deps":
                raise ModuleNotFoundError("pandas: not loaded for the Neo4j driver (rag_engine)", name=name)
            frame = frame.f_back
        return None


if not any(isinstance(f, _DriverWithoutPandas) for f in sys.meta_path):
    sys.meta_path.insert(0, _DriverWithoutPandas())
