"""The run launcher of a single-host deployment: Dagster's DefaultRunLauncher plus the worker
health check that run monitoring calls, so a run whose process died is marked failed.

DefaultRunLauncher starts each run worker as a child of the code server. When only the worker
dies, the code server reports the failure; when both die (the OOM killer, a ``kill -9`` of
``dg dev``, a reboot) nothing does, and the run stays STARTED, holding a run slot: the default
launcher has no health check for the daemon's run monitoring to call. This one reads the pid the
worker recorded in its "Started process for run" engine event and asks the operating system
(psutil) whether that process is alive; a process created after the event holds a reused pid.

A pid means something only on the host that runs the workers: this launcher is for single-host
deployments (``dg dev``, one VM). A cluster uses the K8sRunLauncher (deploy/k8s/dagster.yaml),
which checks its Kubernetes Jobs.
"""

from __future__ import annotations

import psutil
from dagster import DagsterEventType, DagsterInstance, DagsterRun, DefaultRunLauncher
from dagster._core.launcher import CheckRunHealthResult, WorkerStatus

WORKER_STARTED = "Started process for run"
CLOCK_SLACK_S = 1.0  # the event's timestamp and the process's creation time come from two clocks


def worker_pid(instance: DagsterInstance, run: DagsterRun) -> tuple[int, float] | None:
    """(pid, event timestamp) of the run's latest worker, or None before one started."""
    for entry in reversed(instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT)):
        event = entry.dagster_event
        if not entry.message.startswith(WORKER_STARTED) or event is None:
            continue
        pid = event.engine_event_data.metadata.get("pid")
        if pid is not None:
            return int(str(pid.value)), entry.timestamp
    return None


class MonitoredRunLauncher(DefaultRunLauncher):
    """DefaultRunLauncher whose run workers run monitoring can check (same host only)."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: DagsterRun) -> CheckRunHealthResult:
        found = worker_pid(self._instance, run)
        if found is None:  # executed in process (no worker), or the worker has not started yet
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no run worker pid recorded")
        pid, started_at = found
        try:
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker process {pid} exited")
            if process.create_time() > started_at + CLOCK_SLACK_S:
                return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker process {pid} is gone (pid reused)")
        except psutil.NoSuchProcess:
            return CheckRunHealthResult(WorkerStatus.FAILED, f"run worker process {pid} is gone")
        except psutil.AccessDenied:  # another user's process holds the pid: cannot tell, do not fail the run
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker process {pid}: access denied")
        return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker process {pid} is alive")
