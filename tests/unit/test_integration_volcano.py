"""Volcano's queues, the third integration (integrations/volcano/): a Volcano gang's
PodGroup goes to the queue the job's label names, offline (`disttrain render`) and as the
shell creates it; a label no Volcano gang reads is said on the job. Volcano is not built
here (no Go module of it is pinned), so the PodGroup is checked against Volcano's
documented API (PodGroup spec.queue), not run by Volcano."""

from __future__ import annotations

import asyncio
import dataclasses

from disttrain.api import load_job
from disttrain.integrations.registry import owned_children
from disttrain.integrations.volcano.queue import IGNORED, QUEUE_LABEL, InVolcanoQueue

from disttrain.operator.core.plan import decide

from .fake_kube import FakeKube
from .helpers import job
from .plan_builders import NOW, POLICY, state

VOLCANO_GANG = {"schedulerName": "volcano", "gang": {}}
COSCHEDULING_GANG = {"schedulerName": "scheduler-plugins-scheduler", "gang": {}}


def labelled(queue: str | None = "research", **spec) -> dict:
    doc = job(nodes=2, **spec)
    if queue is not None:
        doc["metadata"]["labels"] = {QUEUE_LABEL: queue}
    return doc


def in_queue(base):
    return dataclasses.replace(base, joined=(InVolcanoQueue(queue="research"),))


def pod_group(doc: dict) -> dict | None:
    j, r, _ = load_job(doc)
    return next((c for c in owned_children(j, r) if c["kind"] == "PodGroup"), None)


def test_a_volcano_gang_goes_to_the_queue_its_label_names():
    group = pod_group(labelled(scheduling=VOLCANO_GANG))
    assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["spec"] == {"minMember": 2, "queue": "research"}


def test_no_label_or_another_scheduler_leaves_the_podgroup_as_it_was():
    assert "queue" not in pod_group(labelled(None, scheduling=VOLCANO_GANG))["spec"]
    assert "queue" not in pod_group(labelled(scheduling=COSCHEDULING_GANG))["spec"]


def test_a_label_no_volcano_gang_reads_is_said_on_the_job_and_it_runs_as_without_it():
    for scheduling in (COSCHEDULING_GANG, None):
        spec = {"nodes": 2, **({"scheduling": scheduling} if scheduling else {})}
        plan = decide(in_queue(state(None, **spec)), [], NOW, POLICY)
        assert plan.create == [0, 1]
        warned = [e for e in plan.events if e.reason == IGNORED]
        assert len(warned) == 1 and f"{QUEUE_LABEL}=research is ignored" in warned[0].message
    ok = decide(in_queue(state(None, nodes=2, scheduling=VOLCANO_GANG)), [], NOW, POLICY)
    assert not [e for e in ok.events if e.reason == IGNORED]


def test_the_shell_creates_the_volcano_podgroup_in_its_queue_before_any_worker():
    from disttrain.operator.controller import Controller
    from disttrain.operator.core.state import Policy
    from disttrain.operator.metrics import OperatorMetrics
    from disttrain.operator.settings import Settings

    from .fake_clock import FakeClock

    kube = FakeKube({("team-a", "demo"): "u1"})

    async def scenario():
        shell = Controller(settings=Settings(), kube=kube, metrics=OperatorMetrics(), policy=Policy(),
                           clock=FakeClock())
        shell.pods_index = {}
        doc = labelled(scheduling=VOLCANO_GANG)
        doc["metadata"].update(uid="u1", generation=1, creationTimestamp="2026-11-24T12:00:00Z")
        shell.job_event(("team-a", "demo"), doc, "ADDED")
        await shell.reconcile(("team-a", "demo"))
        await shell.settled()

    asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    kinds = [c[1] for c in kube.verbs("create")]
    assert kinds.index("PodGroup") < kinds.index("Pod")
    group = kube.objects[("PodGroup.scheduling.volcano.sh", "team-a", "demo")]
    assert group["spec"] == {"minMember": 2, "queue": "research"}
