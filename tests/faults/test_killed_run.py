"""A killed Dagster run must not stay STARTED.

The run worker is the real one (``dagster api execute_run``, the command every run launcher
starts) on the shipped PostgreSQL instance config; it is killed with SIGKILL mid-step, so
nothing inside it can report. One pass of the daemon's run monitoring then marks the run
failed, through the shipped MonitoredRunLauncher's worker health check. A pass while the
worker is alive leaves the run alone.
"""

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import EmptyWorkspaceTarget
from dagster._daemon.monitoring.run_monitoring import execute_run_monitoring_iteration
from dagster._grpc.types import ExecuteRunArgs

from tests.conftest import ROOT

pytestmark = pytest.mark.postgres
WAIT_S = 60  # an upper bound for the worker to start on a loaded machine, not a timing assertion


@dg.op(config_schema={"marker": str})
def wait_until_killed(context: dg.OpExecutionContext) -> None:
    Path(context.op_config["marker"]).write_text(str(os.getpid()))
    time.sleep(WAIT_S)


@dg.job(executor_def=dg.in_process_executor)  # the step runs in the worker process: one process to kill
def killable() -> None:
    wait_until_killed()


def _wait_for(what: str, ready) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.2)


def _monitor_once(instance: dg.DagsterInstance) -> None:
    with WorkspaceProcessContext(instance, EmptyWorkspaceTarget()) as workspace:
        errors = [e for e in execute_run_monitoring_iteration(workspace, logging.getLogger("run_monitoring")) if e]
    assert not errors, errors


def test_a_killed_run_worker_is_marked_failed_by_run_monitoring(tmp_path, postgres_url, monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_URL", postgres_url)
    (tmp_path / "dagster.yaml").write_text((ROOT / "config" / "dagster-postgres.yaml").read_text())
    marker = tmp_path / "step-started"
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.run_monitoring_enabled
        assert type(instance.run_launcher).__name__ == "MonitoredRunLauncher"
        job = dg.reconstructable(killable)
        run = instance.create_run_for_job(
            job_def=killable,
            run_config={"ops": {"wait_until_killed": {"config": {"marker": str(marker)}}}},
            job_code_origin=job.get_python_origin(),
        )
        args = ExecuteRunArgs(job_origin=job.get_python_origin(), run_id=run.run_id, instance_ref=instance.get_ref())
        # the run worker command is `dagster api execute_run ...`: this venv's dagster first
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        }
        worker = subprocess.Popen(args.get_command_args(), cwd=ROOT, env=env)
        try:
            _wait_for("the step to start", marker.exists)
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
            _monitor_once(instance)  # alive: left alone
            assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED
        finally:
            worker.kill()
            worker.wait()
        assert worker.returncode == -9
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.STARTED  # nothing reported it

        _monitor_once(instance)

        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
        failure = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
        assert len(failure) == 1
        assert f"run worker process {worker.pid} is gone" in failure[0].message
