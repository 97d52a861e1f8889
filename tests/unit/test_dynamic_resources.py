"""GPUs through DRA (integrations/dynamic_resources): a job with spec.devices owns one
ResourceClaimTemplate, each worker claims from it, processes per worker follow the count,
and GPUs are asked for one way only."""

from __future__ import annotations

import dataclasses

from disttrain.api import load_job, validate_document
from disttrain.integrations.registry import render_children

from .helpers import job as job_doc

CLASS = "gpu.example.com"
SELECTOR = 'device.attributes["gpu.example.com"].memory >= quantity("80Gi")'
DRA = {"nodes": 2, "devices": {"className": CLASS, "count": 4, "selectors": [SELECTOR]}}


def test_a_job_with_devices_owns_one_claim_template_and_each_worker_claims_from_it():
    job, resolved, _ = load_job(job_doc(**DRA))
    job = dataclasses.replace(job, uid="u-1")
    children = render_children(job, resolved)
    (template,) = [c for c in children if c["kind"] == "ResourceClaimTemplate"]
    assert template["apiVersion"] == "resource.k8s.io/v1" and template["metadata"]["name"] == "demo-devices"
    assert template["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert template["spec"]["spec"]["devices"]["requests"] == [{"name": "gpus", "exactly": {
        "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 4,
        "selectors": [{"cel": {"expression": SELECTOR}}],
        # A sick device's NoExecute taint leaves evictGraceSeconds (60) and a margin to move first.
        "tolerations": [{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 90}]}}]
    assert template["spec"]["metadata"]["labels"]["disttrain.dev/job"] == "demo"  # each claim: whose it is
    pods = [c for c in children if c["kind"] == "Pod"]
    assert len(pods) == 2 and children.index(template) < children.index(pods[0])  # there before any worker
    for pod in pods:
        assert pod["spec"]["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": "demo-devices"}]
        container = pod["spec"]["containers"][0]
        assert container["resources"]["claims"] == [{"name": "gpus"}]
        assert "nvidia.com/gpu" not in (container["resources"].get("limits") or {})
        env = {e["name"]: e.get("value") for e in container.get("env") or []}
        assert env["DISTTRAIN_GPUS_PER_NODE"] == "4"
    # Processes per worker and precision follow the devices, as they follow gpusPerNode.
    assert (resolved.nproc_per_node, resolved.world_size, resolved.precision) == (4, 8, "bf16-mixed")


def test_a_job_without_devices_renders_no_template_and_no_claim():
    job, resolved, _ = load_job(job_doc(nodes=2, gpusPerNode=4))
    children = render_children(job, resolved)
    assert not [c for c in children if c["kind"] == "ResourceClaimTemplate"]
    assert all("resourceClaims" not in c["spec"] for c in children if c["kind"] == "Pod")


def test_gpus_are_asked_for_one_way_and_a_device_class_is_required():
    both = [str(e) for e in validate_document(job_doc(**DRA, gpusPerNode=4)).errors]
    assert len(both) == 1 and both[0].startswith("spec.gpusPerNode: is set beside spec.devices")
    assert "Fix: remove spec.gpusPerNode" in both[0]
    no_class = [str(e) for e in validate_document(job_doc(nodes=2, devices={"count": 4})).errors]
    assert no_class and no_class[0].startswith("spec.devices.className")


def test_a_worker_holding_a_tainted_device_moves_off_its_node_naming_the_device_and_the_taint():
    from disttrain.api import conditions as c
    from disttrain.integrations.dynamic_resources import taints
    from disttrain.operator.core.nodes import summarize_node
    from disttrain.operator.core.plan import decide

    from .plan_builders import NOW, POLICY, pod, state

    driver = "gpu.example.com"
    claim = {"metadata": {"ownerReferences": [{"kind": "Pod", "name": "demo-worker-0"}]},
             "status": {"allocation": {"devices": {"results": [
                 {"driver": driver, "pool": "node-a", "device": f"gpu-{i}"} for i in range(4)]}}}}
    held = taints.allocated(claim)
    assert held == ("demo-worker-0", tuple((driver, "node-a", f"gpu-{i}") for i in range(4)))
    slice_body = {"spec": {"driver": driver, "pool": {"name": "node-a"}, "devices": [
        {"name": "gpu-7", "taints": [{"key": "example.com/xid", "value": "79", "effect": "NoExecute"}]},
        {"name": "gpu-2", "taints": [{"key": "example.com/info", "effect": "None"}]}]}}
    tainted = taints.slice_taints(slice_body)
    assert list(tainted) == [(driver, "node-a", "gpu-7")]  # an effect None taint is no sickness
    assert taints.sick_workers([held], tainted, []) == {}  # gpu-7 is not one the worker holds
    rule = taints.rule_of({"spec": {"deviceSelector": {"driver": driver, "device": "gpu-2"},
                                    "taint": {"key": "example.com/ecc", "effect": "NoSchedule"}}})
    sick = taints.sick_workers([held], tainted, [rule])
    assert sick == {"demo-worker-0": "device gpu.example.com/node-a/gpu-2 tainted example.com/ecc:NoSchedule"}

    spec = {"nodes": 2, "devices": {"className": CLASS, "count": 4}}
    job = dataclasses.replace(state({"phase": "Running"}, **spec), joined=(taints.Claimed(sick=sick),))
    pods = [dataclasses.replace(pod(i, **spec), node=n) for i, n in enumerate(("node-a", "node-b"))]
    nodes = {n: summarize_node({"metadata": {"name": n}, "status": {"conditions": [
        {"type": "Ready", "status": "True"}]}}) for n in ("node-a", "node-b")}
    plan = decide(job, pods, NOW, POLICY, nodes=nodes)
    said = [e.message for e in plan.events if e.reason == c.NODE_UNHEALTHY]
    assert said and said[0].startswith("node node-a is unhealthy: device gpu.example.com/node-a/gpu-2 tainted "
                                    "example.com/ecc:NoSchedule; moving the workers off it")
    assert {why for _, why in plan.delete} == {"NodeUnhealthy"}  # the workers restart, off that node
    (stop,) = plan.status.failures
    assert stop.node == "node-a" and "gpu-2 tainted example.com/ecc" in stop.message


def test_a_compute_domain_job_owns_one_and_each_worker_claims_its_channel():
    job, resolved, _ = load_job(job_doc(nodes=2, gpusPerNode=4, computeDomain={}))
    children = render_children(dataclasses.replace(job, uid="u-1"), resolved)
    (domain,) = [c for c in children if c["kind"] == "ComputeDomain"]
    assert domain["apiVersion"] == "resource.nvidia.com/v1beta1" and domain["metadata"]["name"] == "demo-nvlink"
    assert domain["spec"] == {"channel": {"resourceClaimTemplate": {"name": "demo-nvlink-channel"},
                                          "allocationMode": "Single"}}  # no numNodes: no worker waits for a count
    for pod in (c for c in children if c["kind"] == "Pod"):
        assert pod["spec"]["resourceClaims"] == [{"name": "nvlink", "resourceClaimTemplateName": "demo-nvlink-channel"}]
        resources = pod["spec"]["containers"][0]["resources"]
        assert resources["claims"] == [{"name": "nvlink"}] and resources["limits"]["nvidia.com/gpu"] == "4"
