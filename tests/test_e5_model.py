"""The in-process e5 model loads its OpenMP runtime with one thread and passive waiting, leaves the
process's environment as it was, and keeps what the operator set (a fresh process each: the
runtime reads its settings once, when the model's library loads; OMP_DISPLAY_ENV makes it print them)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

PROBE = (
    "import os; from rag_engine.text import e5_model; e5_model.shared(); "
    "print('after', os.environ.get('OMP_NUM_THREADS'), os.environ.get('OMP_WAIT_POLICY'))"
)


def _load(**env: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("OMP_")}
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**base, "OMP_DISPLAY_ENV": "true", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout + done.stderr


def test_the_model_runs_one_thread_that_sleeps_when_idle_and_the_environment_is_left_as_it_was():
    out = _load()
    assert "OMP_NUM_THREADS = '1'" in out and "OMP_WAIT_POLICY = 'PASSIVE'" in out, out
    assert "after None None" in out  # servers this process starts later get their own defaults


@pytest.mark.parametrize(("threads", "policy"), [("2", "ACTIVE")])
def test_settings_the_operator_made_are_kept(threads, policy):
    out = _load(OMP_NUM_THREADS=threads, OMP_WAIT_POLICY=policy.lower())
    assert f"OMP_NUM_THREADS = '{threads}'" in out and f"OMP_WAIT_POLICY = '{policy}'" in out, out
    assert f"after {threads} {policy.lower()}" in out
