"""Render follows the pod contract in docs/pod-contract.md."""

from __future__ import annotations

import dataclasses
import json

import pytest

from disttrain.api import load_job
from disttrain.integrations.registry import render_children
from disttrain.render import TEMPLATE_HASH_ANNOTATION, template_hash

from .helpers import CHILD_METADATA, job


def render(**spec):
    doc = job(**spec)
    doc["metadata"]["uid"] = "0b6a1c52-uid"
    j, r, _ = load_job(doc)
    # The Service and the pods (the PodDisruptionBudget and PodGroup have tests of their own).
    return [c for c in render_children(j, r) if c["kind"] in ("Service", "Pod")]


def env_of(pod) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def test_service_is_headless_and_publishes_not_ready_addresses():
    service = render(nodes=2)[0]
    assert service["kind"] == "Service" and service["metadata"]["name"] == "demo"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {"disttrain.dev/job": "demo", "disttrain.dev/role": "worker"}


def test_one_pod_per_node_with_stable_dns_names():
    _, *pods = render(nodes=3)
    assert [p["metadata"]["name"] for p in pods] == ["demo-worker-0", "demo-worker-1", "demo-worker-2"]
    for i, pod in enumerate(pods):
        assert pod["spec"]["hostname"] == f"demo-worker-{i}"
        assert pod["spec"]["subdomain"] == "demo"
        assert pod["metadata"]["labels"]["disttrain.dev/worker-index"] == str(i)
        assert pod["spec"]["restartPolicy"] == "Never"


def test_every_child_is_owned_by_the_job():
    for child in render(nodes=2):
        (owner,) = child["metadata"]["ownerReferences"]
        assert owner == {"apiVersion": "disttrain.dev/v1alpha1", "kind": "DistributedTraining",
                         "name": "demo", "uid": "0b6a1c52-uid", "controller": True,
                         "blockOwnerDeletion": True}


def test_torchrun_env():
    _, first, second = render(nodes=2, minNodes=1, maxNodes=3, gpusPerNode=4, maxRestarts=5,
                              rendezvous={"port": 29500, "joinTimeoutSeconds": 120})
    env = env_of(first)
    assert env["PET_NNODES"] == "1:3"
    assert env["PET_NPROC_PER_NODE"] == "4"
    assert env["PET_RDZV_BACKEND"] == "c10d"
    assert env["PET_RDZV_ENDPOINT"] == "demo-worker-0.demo.team-a.svc:29500"
    assert env["PET_RDZV_ID"] == "0b6a1c52-uid"
    assert env["PET_MAX_RESTARTS"] == "5"
    assert env["PET_RDZV_CONF"] == "join_timeout=120,last_call_timeout=30,is_host=true"
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert int(env["PET_SHUTDOWN_TIMEOUT"]) < first["spec"]["terminationGracePeriodSeconds"]
    assert env_of(second)["PET_RDZV_CONF"].endswith("is_host=false")
    assert first["spec"]["containers"][0]["command"] == ["torchrun", "--module", "disttrain_trainer"]


def test_trainer_env():
    _, pod = render(strategy="fsdp", gpusPerNode=4, mesh={"fsdp": 2, "tp": 2}, accumulateGradBatches=4,
                    trainer={"builtin": {"steps": 500, "batchSize": 4}},
                    checkpoint={"intervalSteps": 50, "keep": 2, "async": True, "claimName": "c"})
    env = env_of(pod)
    assert env["DISTTRAIN_STRATEGY"] == "fsdp"
    assert (env["DISTTRAIN_MESH_FSDP"], env["DISTTRAIN_MESH_TP"]) == ("2", "2")
    assert env["DISTTRAIN_PRECISION"] == "bf16-mixed"
    assert env["DISTTRAIN_ACCUMULATE_GRAD_BATCHES"] == "4"
    assert (env["DISTTRAIN_STEPS"], env["DISTTRAIN_BATCH_SIZE"]) == ("500", "4")
    assert env["DISTTRAIN_CHECKPOINT_DIR"] == "/checkpoints"
    assert (env["DISTTRAIN_CHECKPOINT_INTERVAL_STEPS"], env["DISTTRAIN_CHECKPOINT_KEEP"]) == ("50", "2")
    assert env["DISTTRAIN_CHECKPOINT_ASYNC"] == "true"
    assert env["DISTTRAIN_METRICS_PORT"] == "9400"
    assert env["DISTTRAIN_JOB_NAME"] == "demo" and env["DISTTRAIN_NAMESPACE"] == "team-a"
    assert env["DISTTRAIN_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_custom_command_runs_under_torchrun_without_builtin_env():
    _, pod = render(trainer={"command": ["/w/train.py"], "args": ["--lr", "1"]},
                    env=[{"name": "FOO", "value": "bar"}])
    container = pod["spec"]["containers"][0]
    assert container["command"] == ["torchrun", "/w/train.py", "--lr", "1"]
    env = env_of(pod)
    assert "DISTTRAIN_MODEL" not in env and env["FOO"] == "bar" and "PET_NNODES" in env
    assert "readinessProbe" not in container


def test_security_context_and_no_api_credentials():
    _, pod = render()
    spec = pod["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    container = spec["containers"][0]["securityContext"]
    assert container == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                         "capabilities": {"drop": ["ALL"]}}
    assert spec["terminationGracePeriodSeconds"] >= 60


def test_volumes_shm_tmp_and_checkpoint_claim():
    _, pod = render(checkpoint={"claimName": "ckpt", "path": "/ckpt"})
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes["checkpoints"]["persistentVolumeClaim"] == {"claimName": "ckpt"}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory"}
    mounts = {m["name"]: m["mountPath"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {"checkpoints": "/ckpt", "dshm": "/dev/shm", "tmp": "/tmp"}
    _, pod = render()
    assert {v["name"]: v for v in pod["spec"]["volumes"]}["checkpoints"] == {"name": "checkpoints", "emptyDir": {}}


def test_an_object_store_gets_its_url_and_credentials_by_reference_and_no_volume():
    pod = render(nodes=2, checkpoint={"uri": "s3://team-ckpt/runs/a", "secretRef": {"name": "s3-creds"},
                                      "endpoint": "http://minio.storage:9000"})[1]
    env = env_of(pod)
    assert env["DISTTRAIN_CHECKPOINT_DIR"] == "s3://team-ckpt/runs/a"
    assert env["AWS_ACCESS_KEY_ID"] == {"secretKeyRef": {"name": "s3-creds", "key": "AWS_ACCESS_KEY_ID"}}
    assert env["AWS_SECRET_ACCESS_KEY"] == {"secretKeyRef": {"name": "s3-creds", "key": "AWS_SECRET_ACCESS_KEY"}}
    assert env["AWS_SESSION_TOKEN"] == {"secretKeyRef": {"name": "s3-creds", "key": "AWS_SESSION_TOKEN",
                                                         "optional": True}}
    assert env["AWS_ENDPOINT_URL_S3"] == "http://minio.storage:9000"
    assert "checkpoints" not in {v["name"] for v in pod["spec"]["volumes"]}
    assert "checkpoints" not in {m["name"] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    # Without a Secret or endpoint the pod's own identity and AWS S3 are used: nothing set.
    plain = render(nodes=2, checkpoint={"uri": "s3://team-ckpt/runs/a"})[1]
    assert not [name for name in env_of(plain) if name.startswith("AWS_")]


def test_storage_none_mounts_and_sets_nothing_for_checkpoints():
    pod = render(nodes=2, trainer={"command": ["--module", "team.train"]}, checkpoint={"storage": "none"})[1]
    assert not [name for name in env_of(pod) if name.startswith("DISTTRAIN_CHECKPOINT")]
    assert "checkpoints" not in {v["name"] for v in pod["spec"]["volumes"]}


def test_checkpoint_fields_added_later_change_no_running_jobs_template_hash():
    """Hashes of jobs made before uri, secretRef, endpoint and storage existed (computed by
    the operator of that time): an upgrade must not replace their workers."""
    assert template_hash(*load_job(job(nodes=2))[:2]) == "62a7e61cff1e4409"
    assert template_hash(*load_job(job(checkpoint={"claimName": "ckpt", "path": "/ckpt", "async": True}))[:2]) \
        == "96efeb859f0843c8"
    assert template_hash(*load_job(job(nodes=2, checkpoint={"uri": "s3://b-1/x"}))[:2]) != "62a7e61cff1e4409"


def test_gpu_limits_and_resources():
    _, pod = render(gpusPerNode=8, gpuResourceName="amd.com/gpu",
                    resources={"requests": {"cpu": "16", "memory": "64Gi"}, "limits": {"memory": "64Gi"}})
    resources = pod["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"memory": "64Gi", "amd.com/gpu": "8"}
    assert resources["requests"] == {"cpu": "16", "memory": "64Gi", "amd.com/gpu": "8"}
    _, pod = render()
    assert "resources" not in pod["spec"]["containers"][0]


def test_probe_and_ports():
    _, pod = render()
    container = pod["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {"rendezvous": 29400, "metrics": 9400}


def test_scheduling():
    _, pod = render(scheduling={"schedulerName": "volcano", "priorityClassName": "high",
                                "nodeSelector": {"gpu": "h100"},
                                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]})
    spec = pod["spec"]
    assert spec["schedulerName"] == "volcano" and spec["priorityClassName"] == "high"
    assert spec["nodeSelector"] == {"gpu": "h100"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists"}]


def test_pod_template_merges_into_the_trainer_container_and_appends_lists():
    _, pod = render(podTemplate={
        "metadata": {"labels": {"team": "nlp"}, "annotations": {"a": "b"}},
        "spec": {"containers": [{"name": "trainer", "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                                 "env": [{"name": "X", "value": "1"}]},
                                {"name": "sidecar", "image": "busybox"}],
                 "volumes": [{"name": "data", "emptyDir": {}}],
                 "nodeSelector": {"zone": "a"}}})
    spec = pod["spec"]
    trainer, sidecar = spec["containers"]
    assert trainer["name"] == "trainer" and trainer["command"][0] == "torchrun"
    assert {"name": "data", "mountPath": "/data"} in trainer["volumeMounts"]
    assert len(trainer["volumeMounts"]) == 4
    assert env_of(pod)["X"] == "1" and "PET_NNODES" in env_of(pod)
    assert sidecar == {"name": "sidecar", "image": "busybox"}
    assert [v["name"] for v in spec["volumes"]] == ["checkpoints", "dshm", "tmp", "data"]
    assert spec["nodeSelector"] == {"zone": "a"}
    assert pod["metadata"]["labels"]["team"] == "nlp"
    assert pod["metadata"]["labels"]["disttrain.dev/job"] == "demo"


def test_template_hash_ignores_live_fields_and_tracks_the_rest():
    base = load_job(job(nodes=2, minNodes=1, maxNodes=4))
    scaled = load_job(job(nodes=3, minNodes=1, maxNodes=4, backoffLimit=1, suspend=True))
    changed = load_job(job(nodes=2, minNodes=1, maxNodes=4, image="other:1"))
    h = lambda x: template_hash(x[0], x[1])  # noqa: E731
    assert h(base) == h(scaled)
    assert h(base) != h(changed)
    _, pod = render()
    assert pod["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION]


def test_template_hash_is_kept_per_object_and_never_answers_for_a_changed_copy():
    spec_job, resolved = load_job(job(nodes=2))[:2]
    first = template_hash(spec_job, resolved)
    assert template_hash(spec_job, resolved) == first
    other = dataclasses.replace(spec_job, spec=dataclasses.replace(spec_job.spec, image="other:1"))
    assert template_hash(other, resolved) != first
    assert template_hash(other, resolved) == template_hash(*load_job(job(nodes=2, image="other:1"))[:2])


def test_fixed_size_job_changes_template_when_nodes_change():
    # Without an elastic range, PET_NNODES follows nodes, so pods must be replaced.
    assert template_hash(*load_job(job(nodes=2))[:2]) != template_hash(*load_job(job(nodes=3))[:2])


def test_rendered_children_are_valid_kubernetes_api_objects():
    """The official client validates bodies strictly (quantities are strings, ...)."""
    from kubernetes import client

    children = render(nodes=2, gpusPerNode=8, resources={"requests": {"cpu": 4, "memory": "8Gi"}},
                      scheduling={"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
                                  "nodeSelector": {"a": "b"}},
                      env=[{"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
                      podTemplate={"spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}})
    api = client.ApiClient()

    def typed(obj: dict, kind: str):  # noqa: ANN202  (the client's public deserializer reads a response's data)
        return api.deserialize(type("Response", (), {"data": json.dumps(obj)})(), kind)

    typed(children[0], "V1Service")
    for pod in children[1:]:
        model = typed(pod, "V1Pod")
        assert model.spec.containers[0].resources.limits["nvidia.com/gpu"] == "8"
        assert model.spec.containers[1].name == "sidecar"


def test_network_policy_admits_the_job_its_operator_and_prometheus_only():
    from disttrain.render.network_policy import NetworkPolicySettings, render_network_policy

    doc = job(nodes=2, metrics={"port": 9500})
    doc["metadata"]["uid"] = "u-1"
    j, _ = load_job(doc)[:2]
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    policy = render_network_policy(j, NetworkPolicySettings(metrics_from=(prometheus,), operator_namespace="ops"))
    workers = {"matchLabels": {"disttrain.dev/job": "demo", "disttrain.dev/role": "worker"}}
    # Whole, so a misspelt key (which the API server would drop) fails here.
    assert policy == {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": CHILD_METADATA,
        "spec": {"podSelector": workers, "policyTypes": ["Ingress"], "ingress": [
            {"from": [{"podSelector": workers}]},
            {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ops"}},
                       "podSelector": {"matchLabels": {"app.kubernetes.io/name": "disttrain",
                                                       "app.kubernetes.io/component": "operator"}}},
                      prometheus],
             "ports": [{"protocol": "TCP", "port": 9500}]}]},
    }
    # Nobody on the metrics port when no one is named: that rule is left out. A job not yet
    # stored (no uid, no namespace: `disttrain render`) gets no owner and the default namespace.
    doc = job(nodes=2)
    del doc["metadata"]["namespace"]
    bare = render_network_policy(load_job(doc)[0], NetworkPolicySettings())
    assert bare["spec"]["ingress"] == [{"from": [{"podSelector": workers}]}]
    assert bare["metadata"]["namespace"] == "default" and "ownerReferences" not in bare["metadata"]


def test_network_policy_settings_from_the_operator_env():
    from disttrain.render.network_policy import NetworkPolicySettings, network_policy_from_env

    assert network_policy_from_env({}) == NetworkPolicySettings()
    assert network_policy_from_env({"DISTTRAIN_NETWORK_POLICY": " False "}) is None
    assert network_policy_from_env({"DISTTRAIN_NETWORK_POLICY": "TRUE", "DISTTRAIN_OPERATOR_NAMESPACE": "ops",
                                    "DISTTRAIN_NETWORK_POLICY_METRICS_FROM": '[{"podSelector": {}}]'}) == \
        NetworkPolicySettings(metrics_from=({"podSelector": {}},), operator_namespace="ops")
    assert network_policy_from_env({"DISTTRAIN_OPERATOR_NAMESPACE": ""}).operator_namespace is None
    with pytest.raises(ValueError) as bad:
        network_policy_from_env({"DISTTRAIN_NETWORK_POLICY": "yes"})
    assert str(bad.value) == "DISTTRAIN_NETWORK_POLICY='yes': set it to true or false"
    for raw in ("{monitoring}", '{"podSelector": {}}', "[1]", "x" * 300):
        with pytest.raises(ValueError) as bad:
            network_policy_from_env({"DISTTRAIN_NETWORK_POLICY_METRICS_FROM": raw})
        assert str(bad.value) == (
            f"DISTTRAIN_NETWORK_POLICY_METRICS_FROM={raw[:200]!r}: give a JSON list of NetworkPolicyPeers, "
            'e.g. [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]')


def test_nulls_in_the_template_keep_the_pods_hardening_and_volumes():
    """`securityContext: null` or `volumes: null` in podTemplate is no setting (as the schema
    check reads a null), not a way around the hardening the pod policy relies on."""
    plain = render(nodes=1)[1]
    nulls = render(nodes=1, podTemplate={"spec": {
        "securityContext": None, "volumes": None, "tolerations": None, "containers": [
            {"name": "trainer", "securityContext": None, "volumeMounts": None, "resources": None}]}})[1]
    assert nulls["spec"] == plain["spec"]
