"""`make eval-gate-dagster`: the eval gate as the Dagster asset check, on a PostgreSQL instance.

    python -m rag_assets.ci_gate --report var/eval/report.json [--config config/engine.yaml]

Materializes eval_report (recording the report `make eval` wrote: the corpora are not embedded
and the questions not asked again) and runs its blocking eval_gate check in one run, on a Dagster
instance whose storage is PostgreSQL (DAGSTER_PG_URL; a temporary DAGSTER_HOME with
config/dagster-postgres.yaml). The check's evaluation is read back from that storage and printed
like `python -m evals.gates` prints its JSON gate: one line per gate metric, then the reasons.

Exit codes as `python -m evals.gates`: 0 pass or accepted, 1 regression, 2 incomparable; 1 also
when the run itself failed (the eval_report step raised; its error is printed).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import dagster as dg

from evals.gate_models import EXIT_CODES, GateResult
from evals.gate_render import summary
from rag_assets.definitions import build_definitions
from rag_engine import DEFAULT_CONFIG
from rag_engine.engine import project_root

CHECK = dg.AssetCheckKey(dg.AssetKey("eval_report"), "eval_gate")


def instance_config() -> str:
    """The shipped PostgreSQL instance config (its URL is read from DAGSTER_PG_URL, never written)."""
    return (project_root() / "config" / "dagster-postgres.yaml").read_text(encoding="utf-8")


def run_gate(instance: dg.DagsterInstance, config: str, report: str) -> tuple[dg.ExecuteInProcessResult, GateResult]:
    job = build_definitions(config).resolve_implicit_global_asset_job_def()
    result = job.execute_in_process(
        instance=instance,
        asset_selection=[CHECK.asset_key],  # and its checks
        run_config={"ops": {"eval_report": {"config": {"from_report": str(Path(report).resolve())}}}},
        raise_on_error=False,
    )
    # a failing blocking check fails its own step too: only eval_report's failure means no evaluation
    failure = next(
        (e for e in result.all_events if e.event_type_value == "STEP_FAILURE" and e.step_key == "eval_report"), None
    )
    if failure is not None:
        error = failure.step_failure_data.error
        raise RuntimeError(f"eval_report failed: {error.message.strip() if error else failure.message}")
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([CHECK]).get(CHECK)
    event = record.event.dagster_event if record is not None and record.event is not None else None
    if record is None or record.run_id != result.run_id or event is None:
        raise RuntimeError(f"run {result.run_id} stored no {CHECK.to_user_string()} evaluation")
    evaluation = event.asset_check_evaluation_data
    return result, GateResult.model_validate(evaluation.metadata["gate"].value)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rag_assets.ci_gate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", required=True, help="the eval report `make eval` wrote (var/eval/report.json)")
    parser.add_argument("--config", default=os.environ.get("RAG_CONFIG", DEFAULT_CONFIG))
    args = parser.parse_args(argv)
    if not os.environ.get("DAGSTER_PG_URL"):
        print("eval gate (Dagster): DAGSTER_PG_URL is not set (the instance's PostgreSQL storage)", file=sys.stderr)
        return EXIT_CODES["incomparable"]
    with tempfile.TemporaryDirectory(prefix="dagster-home-") as home:
        (Path(home) / "dagster.yaml").write_text(instance_config(), encoding="utf-8")
        with dg.DagsterInstance.from_config(home) as instance:
            storage = type(instance.run_storage).__name__
            try:
                result, gate = run_gate(instance, args.config, args.report)
            except RuntimeError as exc:
                print(f"eval gate (Dagster): {exc}", file=sys.stderr)
                return 1
    print(f"Dagster asset check {CHECK.to_user_string()} (run {result.run_id}, {storage}):")
    print(summary(gate))
    return gate.exit_code


if __name__ == "__main__":
    sys.exit(main())
