"""Hostile objects and least privilege on the real control plane: the pod policy, an
object too deep to decode stored under an older CRD, and what each install mode's
account may do."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
import yaml

from disttrain.operator.__main__ import RECURSION_LIMIT
from disttrain.api import schema

from .conftest import (MANIFESTS, NAMESPACED_SA, OPERATOR_NS, OPERATOR_SA, REPO, condition, job_manifest, kill,
                       pods_of, running_operator, start_operator_process, wait_phase)

pytestmark = pytest.mark.cluster

CRD_PATH = str(MANIFESTS / "crd" / "disttrain.dev_distributedtrainings.yaml")
PRIVILEGED = {"spec": {"hostNetwork": True, "containers": [{"name": "trainer", "securityContext": {
    "privileged": True, "allowPrivilegeEscalation": True}}]}}


def test_privileged_pod_template_is_refused_naming_the_field(cluster, namespace, operator):
    cluster.apply(job_manifest("escape", nodes=1, podTemplate=PRIVILEGED), namespace=namespace)
    job = wait_phase(cluster, namespace, "escape", "Failed")
    message = condition(job, "Validated")["message"]
    assert "spec.podTemplate.spec.hostNetwork: leaves the container sandbox" in message
    assert "spec.podTemplate.spec.containers[0].securityContext.privileged: leaves the container sandbox" in message
    assert "podPolicy.allowNamespaces" in message
    assert pods_of(cluster, namespace, "escape") == []


def test_privileged_pod_template_runs_where_the_platform_allows_it(cluster, namespace, operator_kubeconfig):
    with running_operator(cluster, namespace, operator_kubeconfig,
                          DISTTRAIN_POD_POLICY_ALLOW_NAMESPACES=f"other,{namespace}"):
        cluster.apply(job_manifest("allowed", nodes=1, podTemplate=PRIVILEGED), namespace=namespace)
        wait_phase(cluster, namespace, "allowed", "Running")
        (pod,) = pods_of(cluster, namespace, "allowed")
        assert pod["spec"]["hostNetwork"] is True
        assert pod["spec"]["containers"][0]["securityContext"]["privileged"] is True


def loose_crd() -> dict:
    """Today's CRD with scheduling.affinity free-form again, as it was before 0.2."""
    crd = schema.crd()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["scheduling"]["properties"]["affinity"] = {
        "type": "object", "x-kubernetes-preserve-unknown-fields": True}
    return crd


def deep_job(name: str, depth: int) -> str:
    """JSON text of a job whose affinity nests `depth` levels (built as text: Python's own
    json would hit its recursion limit)."""
    head = json.dumps({"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
                       "metadata": {"name": name}, "spec": {"nodes": 1, "scheduling": {"affinity": "HOLE"}}})
    return head.replace('"HOLE"', '{"a": ' * depth + "1" + "}" * depth)


def keeps_deep_affinity(text: str) -> bool:
    """The job in `text` (JSON) has its affinity nested as sent, not pruned to {}."""
    affinity = json.loads(text or "{}").get("spec", {}).get("scheduling", {}).get("affinity")
    return bool(affinity) and "a" in affinity


@pytest.fixture
def deep_json_readable():
    """This test reads the deep object back too (kubectl -o json); the operator process
    sets its own limit (disttrain/operator/__main__.py)."""
    saved = sys.getrecursionlimit()
    sys.setrecursionlimit(RECURSION_LIMIT)
    yield
    sys.setrecursionlimit(saved)


def test_operator_survives_an_object_too_deep_to_decode_stored_under_an_older_crd(
        cluster, namespace, operator_kubeconfig, tmp_path, deep_json_readable):
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=json.dumps(loose_crd()))
    try:
        # The new schema is served a moment after the apply returns; a create before then is
        # pruned by the old one (affinity {}: a valid job, nothing deep to decode). Wait until
        # a server-side dry run keeps the deep affinity, then create it for real.
        cluster.wait_for(lambda: keeps_deep_affinity(cluster.kubectl(
            "create", "--dry-run=server", "--validate=false", "-o", "json", "-n", namespace, "-f", "-",
            input=deep_job("deep", 1100), check=False).stdout), timeout=60, interval=1,
            what="the loose CRD served (a dry run keeping the deep affinity)")
        cluster.kubectl("create", "--validate=false", "-n", namespace, "-f", "-", input=deep_job("deep", 1100))
        assert keeps_deep_affinity(cluster.kubectl("get", "dt", "deep", "-n", namespace, "-o", "json").stdout)
        cluster.apply(job_manifest("fine", nodes=1), namespace=namespace)
        log = tmp_path / "operator.log"
        process = start_operator_process(namespace, operator_kubeconfig, log)  # the real entry point
        try:
            # A ceiling, not a speed (a fresh process on a loaded machine).
            job = wait_phase(cluster, namespace, "deep", "Failed", stall=180, log=log)
            wait_phase(cluster, namespace, "fine", "Running", stall=180, log=log)
            assert process.poll() is None, log.read_text()[-3000:]
        finally:
            kill(process, signal.SIGTERM)
        message = condition(job, "Validated")["message"]
        assert message.startswith("spec.scheduling.affinity.a.a.a.") and "is nested too deeply" in message
        assert "RecursionError" not in log.read_text()
    finally:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", CRD_PATH)
    # Under the tightened CRD the API server prunes what its schema does not know on read.
    # (once the tightened CRD is served: the update reaches the API server's cache a moment later)
    cluster.wait_for(lambda: cluster.get("dt", "deep", namespace)["spec"]["scheduling"]["affinity"] == {},
                     timeout=30, what="the deep affinity pruned under the tightened CRD")


def test_the_typed_crd_rejects_deep_and_mistyped_objects(cluster, namespace, operator_kubeconfig):
    # Deep inside a typed list: refused outright.
    deep_values = deep_job("deep-values", 1).replace(
        '"affinity": {"a": 1}', '"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": '
        '{"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "In", "values": ['
        + "[" * 1100 + "]" * 1100 + ']}]}]}}}')
    result = cluster.kubectl("create", "--validate=false", "-n", namespace, "-f", "-", input=deep_values, check=False)
    assert result.returncode != 0 and "matchExpressions[0].values[0]" in result.stderr, result.stderr
    # An unknown nested field: strict field validation names it; without it, it is pruned.
    result = cluster.kubectl("create", "-n", namespace, "-f", "-", input=deep_job("deep-unknown", 1100), check=False)
    assert result.returncode != 0 and 'unknown field "spec.scheduling.affinity.a"' in result.stderr, result.stderr
    cluster.kubectl("create", "--validate=false", "-n", namespace, "-f", "-", input=deep_job("deep-pruned", 1100))
    assert cluster.get("dt", "deep-pruned", namespace)["spec"]["scheduling"]["affinity"] == {}
    # Bounds Kubernetes itself does not have.
    too_many = job_manifest("tolerant", nodes=1, scheduling={"tolerations": [{"key": f"k{i}"} for i in range(65)]})
    result = cluster.apply(too_many, namespace=namespace, check=False)
    assert result.returncode != 0 and "must have at most 64 items" in result.stderr, result.stderr
    bad_enum = job_manifest("enum", nodes=1, scheduling={"tolerations": [{"key": "gpu", "effect": "NoSchedul"}]})
    result = cluster.apply(bad_enum, namespace=namespace, check=False)
    assert result.returncode != 0 and 'Unsupported value: "NoSchedul"' in result.stderr, result.stderr


def can_i(cluster, account: str, verb: str, resource: str, namespace: str | None) -> bool:
    scope = ["-n", namespace] if namespace else []
    result = cluster.kubectl("auth", "can-i", verb, resource, *scope,
                             f"--as=system:serviceaccount:{OPERATOR_NS}:{account}", check=False)
    return result.stdout.strip() == "yes"


def test_namespaced_account_cannot_create_pods_outside_its_namespaces(cluster, namespace, install_mode):
    mode, _ = install_mode
    if mode == "cluster-wide":
        # What the cluster-wide mode means: the operator may create pods anywhere.
        assert can_i(cluster, OPERATOR_SA, "create", "pods", "kube-system")
        return
    assert can_i(cluster, NAMESPACED_SA, "create", "pods", namespace)
    assert can_i(cluster, NAMESPACED_SA, "patch", "distributedtrainings.disttrain.dev/status", namespace)
    for other in ("kube-system", "default", OPERATOR_NS):
        assert not can_i(cluster, NAMESPACED_SA, "create", "pods", other), other
        assert not can_i(cluster, NAMESPACED_SA, "delete", "pods", other), other
    assert not can_i(cluster, NAMESPACED_SA, "create", "pods", None)  # cluster-wide
    assert not can_i(cluster, NAMESPACED_SA, "get", "secrets", namespace)
    # Only reads are cluster-scoped.
    assert can_i(cluster, NAMESPACED_SA, "list", "customresourcedefinitions.apiextensions.k8s.io", None)
    assert not can_i(cluster, NAMESPACED_SA, "create", "customresourcedefinitions.apiextensions.k8s.io", None)


def test_the_namespaced_kustomize_overlay_and_chart_mode_are_accepted(cluster, namespace, tmp_path):
    rendered = cluster.kubectl("kustomize", str(MANIFESTS / "namespaced")).stdout
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert "ClusterRoleBinding" in kinds and "Role" in kinds
    cluster_roles = {d["metadata"]["name"]: d["rules"] for d in docs if d["kind"] == "ClusterRole"}
    assert sorted(cluster_roles) == ["disttrain-operator-metrics-reader", "disttrain-operator-read"]
    # Cluster-wide, the operator only reads, and asks for the reviews /metrics needs (a
    # review is created only to read its verdict); the metrics reader is for Prometheus.
    assert all(set(rule["verbs"]) <= {"get", "list", "watch"}
               or (rule["verbs"] == ["create"] and set(rule["resources"]) <= {"tokenreviews", "subjectaccessreviews"})
               for rule in cluster_roles["disttrain-operator-read"])
    assert cluster_roles["disttrain-operator-metrics-reader"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == ["--namespace=disttrain-jobs",
                                                                               "--leader-elect"]
    # The API server accepts every object (the watched namespace is the test's, as dry runs create nothing).
    cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=rendered.replace("disttrain-jobs", namespace))
    helm = os.path.join(cluster.bin_dir, "helm")
    chart = str(REPO / "charts" / "disttrain")
    out = subprocess.run([helm, "template", "disttrain", chart, "-n", namespace, "--set",
                          f"watchNamespaces={{{namespace}}}"], capture_output=True, text=True, env=cluster.env,
                         check=True).stdout
    chart_docs = [d for d in yaml.safe_load_all(out) if d]
    role = next(d for d in chart_docs if d["kind"] == "Role")
    overlay_role = next(d for d in docs if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == namespace and role["rules"] == overlay_role["rules"]
    # the operator's reads and reviews (bound), the metrics reader, the template reader and admin (unbound)
    assert sorted(d["kind"] for d in chart_docs if d["kind"].startswith("Cluster")) == [
        "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding"]
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=out)


def test_each_job_gets_a_network_policy_selecting_exactly_its_workers(cluster, namespace, operator):
    cluster.apply(job_manifest("netpol", nodes=2), namespace=namespace)
    cluster.apply(job_manifest("other", nodes=1), namespace=namespace)
    job = wait_phase(cluster, namespace, "netpol", "Running")
    wait_phase(cluster, namespace, "other", "Running")
    policy = cluster.get("networkpolicy", "netpol", namespace)
    assert policy["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    selector = ",".join(f"{k}={v}" for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    selected = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout)
    assert sorted(p["metadata"]["name"] for p in selected["items"]) == ["netpol-worker-0", "netpol-worker-1"]
    (same_job,) = [rule for rule in policy["spec"]["ingress"] if "ports" not in rule]
    assert same_job["from"] == [{"podSelector": policy["spec"]["podSelector"]}]
    assert all(rule["ports"] == [{"protocol": "TCP", "port": 9400}]
               for rule in policy["spec"]["ingress"] if "ports" in rule)
