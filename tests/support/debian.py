"""Programs from Debian's packages that tests run for real (HAProxy, Redis, Prometheus)."""

from __future__ import annotations

import os
import shutil

import pytest


def debian_binary(command: str, package: str | None = None) -> str:
    """The path of ``command`` (from Debian's ``package``, by default the same name): under CI
    (``$RAG_CI``, which `.ci/run` sets, or ``$CI``) a missing one fails the test, since `.ci/run`
    installs it; elsewhere it skips, saying how to install it."""
    found = shutil.which(command)
    if found is None:
        package = package or command
        if os.environ.get("RAG_CI") or os.environ.get("CI"):
            pytest.fail(f"{command} is not installed: .ci/run installs Debian's {package} package")
        pytest.skip(f"{command} is not installed (apt-get install {package}; .ci/run installs it)")
    return found
