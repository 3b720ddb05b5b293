"""Check the Kubernetes manifests under deploy/k8s/manifests (``make deploy-check``), offline.

1. Schema: every object against the Kubernetes OpenAPI schemas of ``--kubernetes-version``, strict
   (an unknown field is an error), with ``kubernetes-validate`` (PyPI; it bundles the JSON schemas,
   so nothing is fetched at run time). A kind the schemas do not know is an error here (the
   package's own CLI only warns).
2. House rules the schema cannot say: no Secret object (secrets by name only, created by the
   operator); no literal env value under a credential-like name; every container states its CPU
   and memory requests and a memory limit; the query service is ready on ``/v1/health``, and a
   PodDisruptionBudget and a HorizontalPodAutoscaler select it.

One line per object; exit 1 on any finding.

    python deploy/check.py [--kubernetes-version 1.33.0] [DIR_OR_FILE ...]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

HERE = Path(__file__).resolve().parent
MANIFESTS = HERE / "k8s" / "manifests"
KUBERNETES_VERSION = "1.33.0"
QUERY_SERVICE = "rag-serve"
CREDENTIAL_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|API_KEY|AUTH|_URL$|SHA256")
POD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}


def documents(paths: list[Path]) -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for f in files:
            for doc in yaml.safe_load_all(f.read_text(encoding="utf-8")):
                if doc:
                    yield f, doc


def schema_finding(doc: dict[str, Any], version: str) -> str | None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        where = ".".join(str(p) for p in exc.path)
        return f"{where}: {exc.message}"
    except kubernetes_validate.SchemaNotFoundError:
        return f"no schema for kind {doc.get('kind')!r} in {doc.get('apiVersion')!r} (Kubernetes {version})"
    return None


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc.get("kind") not in POD_KINDS:
        return []
    pod = doc.get("spec", {}).get("template", {}).get("spec", {})
    return [*pod.get("initContainers", []), *pod.get("containers", [])]


def rule_findings(doc: dict[str, Any]) -> list[str]:
    out = []
    if doc.get("kind") == "Secret":
        out.append("a Secret object: secrets are referenced by name and created by the operator, never committed")
    for c in containers(doc):
        name = c.get("name")
        for env in c.get("env", []):
            if "value" in env and CREDENTIAL_NAME.search(env["name"]):
                out.append(f"container {name}: env {env['name']} has a literal value; use valueFrom.secretKeyRef")
        res = c.get("resources", {})
        missing = [k for k in ("cpu", "memory") if k not in res.get("requests", {})]
        missing += ["limits.memory"] if "memory" not in res.get("limits", {}) else []
        if missing:
            out.append(f"container {name}: no resources {', '.join(missing)}")
    return out


def query_service_findings(docs: list[dict[str, Any]]) -> list[str]:
    """The query service's Deployment is ready on /v1/health; a PDB and an HPA select it."""
    by_kind = {(d.get("kind"), d.get("metadata", {}).get("name")): d for d in docs}
    deployment = by_kind.get(("Deployment", QUERY_SERVICE))
    if deployment is None:
        return [f"no Deployment {QUERY_SERVICE}"]
    out = []
    probes = [c.get("readinessProbe", {}).get("httpGet", {}).get("path") for c in containers(deployment)]
    if "/v1/health" not in probes:
        out.append(f"Deployment {QUERY_SERVICE}: no readinessProbe on /v1/health")
    labels = deployment["spec"]["selector"].get("matchLabels", {})
    pdb = by_kind.get(("PodDisruptionBudget", QUERY_SERVICE))
    if pdb is None or pdb["spec"].get("selector", {}).get("matchLabels") != labels:
        out.append(f"no PodDisruptionBudget selecting Deployment {QUERY_SERVICE}")
    hpa = by_kind.get(("HorizontalPodAutoscaler", QUERY_SERVICE))
    if hpa is None or hpa["spec"]["scaleTargetRef"].get("name") != QUERY_SERVICE:
        out.append(f"no HorizontalPodAutoscaler scaling Deployment {QUERY_SERVICE}")
    return out


def check(paths: list[Path], version: str) -> int:
    findings = 0
    docs = []
    for f, doc in documents(paths):
        docs.append(doc)
        label = f"{f.name}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        problems = [p for p in [schema_finding(doc, version)] if p] + rule_findings(doc)
        for p in problems:
            print(f"FAIL {label}: {p}")
        if not problems:
            print(f"ok   {label} ({doc.get('apiVersion')})")
        findings += len(problems)
    for p in query_service_findings(docs):
        print(f"FAIL {p}")
        findings += 1
    print(
        f"{len(docs)} objects, {findings} findings (Kubernetes {version}, kubernetes-validate "
        f"{kubernetes_validate.__version__}, strict)"
    )
    return 1 if findings or not docs else 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubernetes-version", default=KUBERNETES_VERSION)
    ap.add_argument("paths", nargs="*", type=Path, default=[MANIFESTS])
    args = ap.parse_args()
    sys.exit(check(args.paths, args.kubernetes_version))


if __name__ == "__main__":
    main()
