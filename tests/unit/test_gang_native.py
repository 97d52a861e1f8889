"""kube-scheduler's own gang (scheduling.gang without schedulerName; Kubernetes 1.37 with the
GenericWorkload feature gate): where the cluster does not serve its PodGroups the job waits,
Pending with no worker, and says how to fix it; where it does, the job says which PodGroup
and scheduler place its workers. The real scheduler places such a gang in
tests/cluster/reconcile/test_gang_native.py."""

from __future__ import annotations

import asyncio
import dataclasses

from disttrain.api import conditions as c
from disttrain.integrations.gang.membership import RECHECK, InGang
from disttrain.operator.core.plan import decide
from disttrain.operator.kube import ApiError

from .fake_kube import FakeKube
from .helpers import job
from .plan_builders import NOW, POLICY, state

NATIVE = {"gang": {}}
FIX = "--feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1beta1=true"


def joined(base, served):
    return dataclasses.replace(base, joined=(InGang(native_served=served),))


def test_where_the_api_is_not_served_the_job_waits_with_no_worker_and_the_fix():
    plan = decide(joined(state(None, nodes=3, scheduling=NATIVE), False), [], NOW, POLICY)
    assert plan.create == [] and plan.status.phase == "Pending"
    running = c.get_condition(plan.status.conditions, c.RUNNING)
    assert running.status == "False" and running.reason == c.GANG_NOT_SERVED
    assert FIX in running.message and "spec.scheduling.schedulerName" in running.message
    assert [e.type for e in plan.events if e.reason == c.GANG_NOT_SERVED] == ["Warning"]
    assert plan.wake_at == NOW + RECHECK  # the gate comes with a restart no watch shows
    again = decide(joined(state(plan.status, nodes=3, scheduling=NATIVE), False), [], NOW + RECHECK, POLICY)
    assert not [e for e in again.events if e.reason == c.GANG_NOT_SERVED]  # said once, not each pass


def test_where_it_is_served_the_workers_are_created_and_the_job_names_podgroup_and_scheduler():
    plan = decide(joined(state(None, nodes=3, scheduling=NATIVE), True), [], NOW, POLICY)
    assert plan.create == [0, 1, 2]
    said = [e for e in plan.events if e.reason == c.GANG_SCHEDULING]
    assert len(said) == 1 and said[0].type == "Normal"
    assert said[0].message == ("the workers join PodGroup demo (scheduling.k8s.io/v1beta1): kube-scheduler itself "
                               "binds 3 or more of them at once, or none")


def test_another_schedulers_gang_is_never_held_by_the_native_api():
    coscheduled = {"schedulerName": "scheduler-plugins-scheduler", "gang": {}}
    plan = decide(joined(state(None, nodes=2, scheduling=coscheduled), False), [], NOW, POLICY)
    assert plan.create == [0, 1]
    assert [e.message.split(": ")[1] for e in plan.events if e.reason == c.GANG_SCHEDULING] == [
        "the coscheduling plugin binds 2 or more of them at once, or none"]


class NotServed(FakeKube):
    """An API server of before 1.37, or without the GenericWorkload gate."""

    def __init__(self, jobs):
        super().__init__(jobs)
        self.served_resources = set()


async def _passes(kube: FakeKube, scheduling: dict, count: int, **settings):
    from disttrain.operator.controller import Controller
    from disttrain.operator.core.state import Policy
    from disttrain.operator.metrics import OperatorMetrics
    from disttrain.operator.settings import Settings

    from .fake_clock import FakeClock

    shell = Controller(settings=Settings(**settings), kube=kube, metrics=OperatorMetrics(), policy=Policy(), clock=FakeClock())
    shell.pods_index = {}
    doc = job(nodes=2, scheduling=scheduling)
    doc["metadata"].update(uid="u1", generation=1, creationTimestamp="2026-11-24T12:00:00Z")
    shell.job_event(("team-a", "demo"), doc, "ADDED")
    for _ in range(count):
        await shell.reconcile(("team-a", "demo"))
        await shell.settled()
    said = []  # the Events decided, as the outbox holds them for the background poster
    while not shell.outbox.empty():
        said.append(shell.outbox.get_nowait()[2])
    return shell.records["u1"].last_status, said


def run(kube: FakeKube, scheduling: dict, count: int = 2, **settings):
    """The job's status after `count` passes, and the reasons of the Events they decided."""
    return asyncio.run(asyncio.wait_for(_passes(kube, scheduling, count, **settings), timeout=60))


def test_the_shell_creates_nothing_where_discovery_lists_no_podgroups_and_asks_discovery_once():
    kube = NotServed({("team-a", "demo"): "u1"})
    status, said = run(kube, NATIVE, count=3)
    assert kube.verbs("create") == [] and said.count(c.GANG_NOT_SERVED) == 1
    assert status.phase == "Pending"
    assert c.get_condition(status.conditions, c.RUNNING).reason == c.GANG_NOT_SERVED
    assert kube.verbs("discover") == [("discover", "scheduling.k8s.io/v1beta1", "podgroups")]  # cached


def test_the_shell_creates_the_native_podgroup_before_the_workers_where_served():
    kube = FakeKube({("team-a", "demo"): "u1"})
    _, said = run(kube, NATIVE)
    created = [v[1:] for v in kube.verbs("create")]
    assert created.index(("PodGroup", "demo")) < created.index(("Pod", "demo-worker-0"))
    group = kube.objects[("PodGroup.scheduling.k8s.io", "team-a", "demo")]
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}
    assert said.count(c.GANG_SCHEDULING) == 1


def test_no_discovery_for_a_job_without_gang_or_with_another_schedulers_gang():
    for scheduling in ({"schedulerName": "volcano", "gang": {}}, {"nodeSelector": {"a": "b"}}):
        kube = FakeKube({("team-a", "demo"): "u1"})
        run(kube, scheduling, count=1)
        assert kube.verbs("discover") == []


class RefusesNativeGroups(FakeKube):
    """Discovery lists the PodGroups, and the create is refused anyway (the gate went off since)."""

    async def create(self, obj):
        if obj["apiVersion"] == "scheduling.k8s.io/v1beta1":
            self.calls.append(("create", obj["kind"], obj["metadata"]["name"]))
            raise ApiError(404, "NotFound", "the server could not find the requested resource", "creating")
        return await super().create(obj)


def test_a_refused_native_podgroup_names_the_feature_gate_not_a_crd():
    status, _ = run(RefusesNativeGroups({("team-a", "demo"): "u1"}), NATIVE)
    forbidden = c.get_condition(status.conditions, c.POD_CREATION_FORBIDDEN)
    assert forbidden.status == "True" and forbidden.message.startswith("creating PodGroup demo was refused (404")
    assert FIX in forbidden.message and "install the CRD" not in forbidden.message


def test_with_a_fallback_a_native_gang_the_cluster_does_not_serve_goes_to_that_scheduler_and_says_so():
    kube = NotServed({("team-a", "demo"): "u1"})
    status, said = run(kube, NATIVE, gang_fallback="coscheduler")
    running = c.get_condition(status.conditions, c.RUNNING)
    assert running is None or running.reason != c.GANG_NOT_SERVED
    group = kube.objects[("PodGroup.scheduling.x-k8s.io", "team-a", "demo")]  # coscheduling's kind
    assert group["spec"]["minMember"] == 2
    pod = kube.objects[("Pod", "team-a", "demo-worker-0")]
    assert pod["spec"]["schedulerName"] == "coscheduler"
    assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "demo"
    assert said.count(c.GANG_SCHEDULING) == 1 and c.GANG_NOT_SERVED not in said


def test_the_fallback_is_named_in_the_jobs_event():
    base = state(None, nodes=3, scheduling=NATIVE)
    plan = decide(dataclasses.replace(base, joined=(InGang(native_served=False, fallback="coscheduler"),)), [],
                  NOW, POLICY)
    assert plan.create == [0, 1, 2]
    (said,) = [e.message for e in plan.events if e.reason == c.GANG_SCHEDULING]
    assert said.startswith("the workers join PodGroup demo (scheduling.x-k8s.io/v1alpha1): the coscheduling plugin "
                           "(scheduler coscheduler, DISTTRAIN_GANG_FALLBACK: the cluster does not serve "
                           "kube-scheduler's own PodGroups) binds 3 or more")
