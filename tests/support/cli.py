"""Run `rag` in-process with typer's CliRunner (stdout and stderr apart)."""

from __future__ import annotations

from collections.abc import Mapping

from click.testing import Result
from typer.testing import CliRunner

from rag_engine.cli.app import app


def rag(*args: str, env: Mapping[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), env=dict(env) if env else None)
