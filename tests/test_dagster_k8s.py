"""deploy/k8s/dagster.yaml: the Kubernetes instance config validates against dagster-k8s's
launcher schema and loads into a real DagsterInstance on PostgreSQL (no cluster: only the
in-cluster credentials, which exist inside a pod alone, are swapped for a kubeconfig file)."""

from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._config import process_config, resolve_to_config_type
from dagster._core.instance.config import dagster_instance_config
from dagster_k8s import K8sRunLauncher

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "deploy" / "k8s" / "dagster.yaml"

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: test, user: {token: not-a-secret}}]
contexts: [{name: test, context: {cluster: test, user: test}}]
current-context: test
"""


def test_the_k8s_instance_config_validates(tmp_path):
    (tmp_path / "dagster.yaml").write_text(CONFIG.read_text())
    config, _ = dagster_instance_config(str(tmp_path))  # the instance schema, every section
    launcher = config["run_launcher"]
    assert (launcher["module"], launcher["class"]) == ("dagster_k8s", "K8sRunLauncher")
    checked = process_config(resolve_to_config_type(K8sRunLauncher.config_type()), launcher["config"])
    assert checked.success, checked.errors
    assert config["run_monitoring"]["enabled"] is True
    assert config["storage"]["postgres"]["postgres_url"] == {"env": "DAGSTER_PG_URL"}


def test_a_launcher_config_error_is_reported():
    raw = yaml.safe_load(CONFIG.read_text())["run_launcher"]["config"]
    del raw["instance_config_map"]
    checked = process_config(resolve_to_config_type(K8sRunLauncher.config_type()), raw)
    assert not checked.success
    assert "instance_config_map" in str(checked.errors)


@pytest.mark.postgres
def test_the_k8s_instance_loads_with_postgres_storage_and_run_monitoring(tmp_path, postgres_url, monkeypatch):
    monkeypatch.setenv("DAGSTER_PG_URL", postgres_url)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    text = CONFIG.read_text()
    local = text.replace(
        "load_incluster_config: true", f"load_incluster_config: false\n    kubeconfig_file: {kubeconfig}"
    )
    assert local != text
    (tmp_path / "dagster.yaml").write_text(local)
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        launcher = instance.run_launcher
        assert isinstance(launcher, K8sRunLauncher)
        assert launcher.supports_check_run_worker_health
        assert launcher.job_namespace == "rag-dagster"
        assert launcher.env_secrets == ["rag-engine-secrets"]
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert instance.run_monitoring_enabled
        assert instance.run_monitoring_start_timeout_seconds == 300
