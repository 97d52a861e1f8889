"""Gang scheduling (spec.scheduling.gang): the PodGroup each scheduler reads, the workers in
it, which scheduler's kind schedulerName picks, and the shell creating the
PodGroup before any worker (or saying on the job why it cannot). The real coscheduling
scheduler places a gang all or nothing in tests/cluster/reconcile/test_gang.py; Volcano
cannot be built here, so its PodGroup is checked for shape only, below."""

from __future__ import annotations

import asyncio

from disttrain.api import load_job, validate_document
from disttrain.operator.kube import ApiError
from disttrain.integrations.gang.pod_group import render_pod_group
from disttrain.integrations.registry import render_children, render_pod
from disttrain.render import template_hash

from .fake_kube import FakeKube
from .helpers import job

GANG = {"schedulerName": "scheduler-plugins-scheduler", "gang": {"scheduleTimeoutSeconds": 30}}


def loaded(**spec):
    doc = job(**spec)
    doc["metadata"]["uid"] = "u-1"
    return load_job(doc)[:2]


def test_a_coscheduling_gang_is_one_podgroup_of_min_nodes_owned_by_the_job_and_every_worker_in_it():
    j, r = loaded(nodes=4, minNodes=3, maxNodes=4, scheduling=GANG)
    group = render_pod_group(j, r)
    assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" and group["kind"] == "PodGroup"
    assert group["metadata"]["name"] == "demo" and group["metadata"]["namespace"] == "team-a"
    assert group["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert group["spec"] == {"minMember": 3, "scheduleTimeoutSeconds": 30}
    pods = [c for c in render_children(j, r) if c["kind"] == "Pod"]
    kinds = [c["kind"] for c in render_children(j, r)]
    assert kinds.index("PodGroup") < kinds.index("Pod")  # the group before its pods
    assert {p["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] for p in pods} == {"demo"}
    assert {p["spec"]["schedulerName"] for p in pods} == {"scheduler-plugins-scheduler"}


def test_a_volcano_gang_shape_only():
    """Volcano is not built here (no Go module of it is pinned): its PodGroup and the pods'
    annotation are checked against Volcano's documented API, not run."""
    j, r = loaded(nodes=2, scheduling={"schedulerName": "volcano", "priorityClassName": "high", "gang": {}})
    group = render_pod_group(j, r)
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["spec"] == {"minMember": 2, "priorityClassName": "high"}
    pod = render_pod(j, r, 0)
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "demo"
    assert "scheduling.x-k8s.io/pod-group" not in pod["metadata"]["labels"]


def test_no_gang_no_podgroup_and_the_same_workers_as_before_gang_existed():
    j, r = loaded(nodes=2, scheduling={"schedulerName": "scheduler-plugins-scheduler"})
    assert render_pod_group(j, r) is None
    assert "scheduling.x-k8s.io/pod-group" not in render_pod(j, r, 0)["metadata"]["labels"]
    ganged, _ = loaded(nodes=2, scheduling=GANG)
    assert template_hash(ganged, r) != template_hash(j, r)  # joining a gang replaces running workers


def test_a_gang_without_schedulerName_is_kube_schedulers_own_podgroup_with_the_pods_priority():
    """kube-scheduler (1.37, GenericWorkload) refuses a gang whose pods' priority is not its
    own, so the PodGroup names the pods' priority class; the pods join by a spec field."""
    assert validate_document(job(nodes=3, scheduling={"gang": {}})).ok
    j, r = loaded(nodes=3, minNodes=2, maxNodes=3, scheduling={"priorityClassName": "high", "gang": {}})
    group = render_pod_group(j, r)
    assert group["apiVersion"] == "scheduling.k8s.io/v1beta1" and group["kind"] == "PodGroup"
    assert group["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}, "priorityClassName": "high"}
    pods = [c for c in render_children(j, r) if c["kind"] == "Pod"]
    assert [p["spec"]["schedulingGroup"] for p in pods] == [{"podGroupName": "demo"}] * 3
    assert {p["spec"]["priorityClassName"] for p in pods} == {"high"}
    assert all("schedulerName" not in p["spec"] for p in pods)  # the default scheduler, as the group's
    assert all("scheduling.x-k8s.io/pod-group" not in p["metadata"]["labels"] for p in pods)
    assert "priorityClassName" not in render_pod_group(*loaded(nodes=2, scheduling={"gang": {}}))["spec"]


def test_only_a_gang_without_schedulerName_is_kube_schedulers_own():
    for scheduling, version in (({"gang": {}}, "scheduling.k8s.io/v1beta1"),
                                ({"schedulerName": "volcano", "gang": {}}, "scheduling.volcano.sh/v1beta1"),
                                ({"schedulerName": "default-scheduler", "gang": {}}, "scheduling.x-k8s.io/v1alpha1")):
        j, r = loaded(nodes=2, scheduling=scheduling)
        assert render_pod_group(j, r)["apiVersion"] == version
        assert ("schedulingGroup" in render_pod(j, r, 0)["spec"]) == (version == "scheduling.k8s.io/v1beta1")


class NoPodGroups(FakeKube):
    """An API server where the PodGroup kind is not served (its CRD is not installed)."""

    async def create(self, obj):
        if obj["kind"] == "PodGroup":
            self.calls.append(("create", obj["kind"], obj["metadata"]["name"]))
            raise ApiError(404, "NotFound", "the server could not find the requested resource", "creating")
        return await super().create(obj)


def _first_pass(kube: FakeKube):
    from disttrain.operator.controller import Controller
    from disttrain.operator.metrics import OperatorMetrics
    from disttrain.operator.core.state import Policy
    from disttrain.operator.settings import Settings

    from .fake_clock import FakeClock

    async def scenario():
        shell = Controller(settings=Settings(), kube=kube, metrics=OperatorMetrics(), policy=Policy(),
                           clock=FakeClock())
        shell.pods_index = {}
        doc = job(nodes=2, scheduling=GANG)
        doc["metadata"].update(uid="u1", generation=1, creationTimestamp="2026-11-24T12:00:00Z")
        shell.job_event(("team-a", "demo"), doc, "ADDED")
        await shell.reconcile(("team-a", "demo"))
        await shell.settled()
        await shell.reconcile(("team-a", "demo"))
        return shell.records["u1"].last_status

    return asyncio.run(asyncio.wait_for(scenario(), timeout=60))


def test_the_shell_creates_the_podgroup_before_any_worker():
    kube = FakeKube({("team-a", "demo"): "u1"})
    _first_pass(kube)
    created = [c[1:] for c in kube.verbs("create")]
    assert created == [("Service", "demo"), ("PodDisruptionBudget", "demo"), ("PodGroup", "demo"),
                       ("Pod", "demo-worker-0"), ("Pod", "demo-worker-1")]


def test_a_podgroup_kind_not_served_creates_no_worker_and_the_job_says_how_to_fix_it():
    kube = NoPodGroups({("team-a", "demo"): "u1"})
    status = _first_pass(kube)
    assert [c[1] for c in kube.verbs("create")] == ["Service", "PodDisruptionBudget", "PodGroup"]
    forbidden = next(c for c in status.conditions if c.type == "PodCreationForbidden")
    assert forbidden.status == "True" and forbidden.message.startswith("creating PodGroup demo was refused (404")
    assert "install the CRD of the scheduler that reads it" in forbidden.message
