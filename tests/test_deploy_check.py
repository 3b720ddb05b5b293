"""deploy/check.py (`make deploy-check`): the committed manifests pass the Kubernetes schemas that
kubernetes-validate bundles (strict, offline) and the house rules; a deliberately broken copy fails."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "deploy" / "check.py"
MANIFESTS = ROOT / "deploy" / "k8s" / "manifests"


def run_check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(CHECK), *map(str, paths)], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_committed_manifests_validate():
    out = run_check()
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 findings" in out.stdout
    for kind in (
        "Deployment/rag-serve",
        "PodDisruptionBudget/rag-serve",
        "HorizontalPodAutoscaler/rag-serve",
        "Deployment/rag-embed",
        "Service/rag-embed",
        "StatefulSet/rag-neo4j",
        "Deployment/rag-dagster-daemon",
    ):
        assert any(line.startswith("ok") and f": {kind} (" in line for line in out.stdout.splitlines()), kind


def _broken(tmp_path: Path, old: str, new: str, name: str = "query-service.yaml") -> Path:
    target = tmp_path / "manifests"
    shutil.copytree(MANIFESTS, target)
    text = (target / name).read_text()
    assert old in text
    (target / name).write_text(text.replace(old, new, 1))
    return target


@pytest.mark.parametrize(
    ("old", "new", "finding"),
    [
        # a misspelled field: strict schemas reject what Kubernetes would silently drop
        ("      periodSeconds: 10\n", "      periodSecond: 10\n", "'periodSecond' was unexpected"),
        # a wrong type
        ("  maxReplicas: 8", "  maxReplicas: eight", "'eight' is not of type 'integer'"),
        # a kind no schema knows (the validator's own CLI only warns)
        ("kind: PodDisruptionBudget", "kind: PodDisruptionBudgets", "no schema for kind 'PodDisruptionBudgets'"),
        # house rules the schema cannot say
        ("httpGet: {path: /v1/health, port: http}", "tcpSocket: {port: http}", "no readinessProbe on /v1/health"),
        ("            limits: {memory: 2Gi}", "            limits: {}", "no resources limits.memory"),
        (
            "          envFrom:\n",
            "          env:\n            - {name: NEO4J_PASSWORD, value: hunter2}\n          envFrom:\n",
            "env NEO4J_PASSWORD has a literal value",
        ),
    ],
)
def test_a_broken_manifest_fails(tmp_path, old, new, finding):
    out = run_check(_broken(tmp_path, old, new))
    assert out.returncode == 1, out.stdout
    assert finding in out.stdout, out.stdout


def test_a_committed_secret_value_fails(tmp_path):
    target = _broken(tmp_path, "kind: Namespace\n", "kind: Namespace\n", "namespaces.yaml")
    (target / "secret.yaml").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata: {name: leaked, namespace: rag-engine}\n"
        "stringData: {NEO4J_PASSWORD: not-a-real-one}\n"
    )
    out = run_check(target)
    assert out.returncode == 1
    assert "a Secret object" in out.stdout
