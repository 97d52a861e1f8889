"""Topology through Kueue's TAS (integrations/kueue/topology.py): what a job asks, the
Workload's topologyRequest, the marks Kueue's ungater finds workers by, the assignment
decoded into the status, and a job that asks where nothing places by topology."""

from __future__ import annotations

import dataclasses

from disttrain.api import conditions as c
from disttrain.api import validate_document
from disttrain.integrations.kueue import topology as tas
from disttrain.integrations.kueue import workload as kueue
from disttrain.integrations.kueue.admission import QueueIgnored, Unqueued
from disttrain.operator.core.nodes import summarize_node
from disttrain.operator.core.plan import decide

from .helpers import job as job_doc
from .kueue_builders import GPU, admitted, queued, workload
from .plan_builders import NOW, POLICY, cond, state

RACK, BLOCK = "example.com/rack", "example.com/block"
RACK_JOB = {**GPU, "nodes": 4, "scheduling": {"topology": {"required": RACK}}}


def errors_of(**spec) -> list[str]:
    return [str(e) for e in validate_document(job_doc(**{**GPU, **spec})).errors]


def test_a_topology_asks_one_level_and_slices_that_divide_every_size():
    assert errors_of(scheduling={"topology": {"required": RACK}}) == []
    both = errors_of(scheduling={"topology": {"required": RACK, "preferred": BLOCK}})
    assert len(both) == 1 and both[0].startswith("spec.scheduling.topology.preferred: is set beside required")
    assert "Fix: remove" in both[0]
    nothing = errors_of(scheduling={"topology": {}})
    assert nothing and "spec.scheduling.topology.required: is not set" in nothing[0]
    half = errors_of(scheduling={"topology": {"preferred": BLOCK, "sliceSize": 2}})
    assert half and half[0].startswith("spec.scheduling.topology.sliceRequired: is not set, and sliceSize needs it")
    odd = errors_of(nodes=6, minNodes=3, maxNodes=8,
                    scheduling={"topology": {"preferred": BLOCK, "sliceRequired": RACK, "sliceSize": 4}})
    assert [e.split(":")[0] for e in odd] == ["spec.nodes", "spec.minNodes"]
    assert "is not a multiple of scheduling.topology.sliceSize (4)" in odd[0]
    bad = errors_of(scheduling={"topology": {"required": "not a label!"}})
    assert bad and "spec.scheduling.topology.required" in bad[0]


def test_the_workload_asks_kueue_for_the_topology_by_worker_index():
    (pod_set,) = workload(RACK_JOB)["spec"]["podSets"]
    assert pod_set["topologyRequest"] == {"required": RACK, "podIndexLabel": "disttrain.dev/worker-index"}
    sliced = {**GPU, "nodes": 8, "scheduling": {"topology": {"preferred": BLOCK, "sliceRequired": RACK,
                                                             "sliceSize": 4}}}
    (pod_set,) = workload(sliced)["spec"]["podSets"]
    assert pod_set["topologyRequest"] == {"preferred": BLOCK, "podSetSliceRequiredTopology": RACK,
                                          "podSetSliceSize": 4, "podIndexLabel": "disttrain.dev/worker-index"}
    (pod_set,) = workload(GPU)["spec"]["podSets"]
    assert "topologyRequest" not in pod_set


def hosts_assignment(*hosts: str) -> dict:
    """Kueue v0.19's compact form: one slice of hosts named by prefix + root, one worker each."""
    return {"levels": ["kubernetes.io/hostname"], "slices": [{
        "domainCount": len(hosts),
        "valuesPerLevel": [{"individual": {"prefix": "node-", "roots": [h.removeprefix("node-") for h in hosts]}}],
        "podCounts": {"universal": 1}}]}


def with_assignment(status: dict, assignment: dict) -> dict:
    status["admission"]["podSetAssignments"][0]["topologyAssignment"] = assignment
    return status


def test_the_compact_assignment_decodes_to_domains_in_kueues_order():
    raw = {"levels": [BLOCK, RACK], "slices": [
        {"domainCount": 2, "valuesPerLevel": [{"universal": "b1"}, {"individual": {"prefix": "r-", "roots": ["1", "2"]}}],
         "podCounts": {"individual": [4, 2]}},
        {"domainCount": 1, "valuesPerLevel": [{"universal": "b2"}, {"universal": "r-9"}], "podCounts": {"universal": 2}}]}
    decoded = tas.decode(raw)
    assert decoded.levels == (BLOCK, RACK)
    assert [(d.values, d.workers) for d in decoded.domains] == [
        (("b1", "r-1"), 4), (("b1", "r-2"), 2), (("b2", "r-9"), 2)]
    assert tas.at_level(decoded, BLOCK, lambda *_: None) == [("b1", 6), ("b2", 2)]
    assert tas.decode(None) is None and tas.decode({"levels": []}) is None


def node(name: str, rack: str) -> dict:
    return {"metadata": {"name": name, "labels": {RACK: rack, BLOCK: "b1"}}, "status": {}}


def test_an_admitted_job_is_placed_by_rank_and_says_which_rack_from_its_nodes_labels():
    status = with_assignment(admitted(), hosts_assignment("node-1", "node-2", "node-3", "node-4"))
    wl = workload(RACK_JOB, status=status)
    nodes = {f"node-{i}": summarize_node(node(f"node-{i}", "r-7")) for i in range(1, 5)}
    plan = decide(queued(RACK_JOB, {"phase": "Pending"}, wl=wl), [], NOW, POLICY, nodes=nodes)
    assert plan.create == [0, 1, 2, 3]
    topology = plan.status.admission.topology
    assert (topology.level, topology.domain_count, topology.hosts) == (RACK, 1, 4)
    assert [(d.name, d.workers) for d in topology.domains] == [("r-7", 4)]
    assert "required example.com/rack) in 1 domain(s): r-7 (4)" in cond(plan, c.ADMITTED)["message"]
    # What each worker carries, for Kueue's ungater to find it and lift its gate.
    placement = kueue.placement_of(kueue.view_of(wl), {})
    assert placement.scheduling_gates == ("kueue.x-k8s.io/topology",)
    assert placement.labels == {"kueue.x-k8s.io/podset": "workers"}
    assert placement.annotations == {"kueue.x-k8s.io/workload": wl["metadata"]["name"],
                                     "kueue.x-k8s.io/podset-required-topology": RACK}
    pod = placement.mark({"metadata": {"labels": {"a": "b"}}, "spec": {}})
    assert pod["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/topology"}]
    assert pod["metadata"]["labels"] == {"a": "b", "kueue.x-k8s.io/podset": "workers"}


def test_a_preferred_level_that_did_not_fit_one_domain_says_it_was_spread():
    spec = {**GPU, "nodes": 4, "scheduling": {"topology": {"preferred": RACK}}}
    status = with_assignment(admitted(), hosts_assignment("node-1", "node-2", "node-3", "node-4"))
    nodes = {f"node-{i}": summarize_node(node(f"node-{i}", "r-1" if i < 3 else "r-2")) for i in range(1, 5)}
    plan = decide(queued(spec, {"phase": "Pending"}, wl=workload(spec, status=status)), [], NOW, POLICY, nodes=nodes)
    assert [(d.name, d.workers) for d in plan.status.admission.topology.domains] == [("r-1", 2), ("r-2", 2)]
    assert "did not fit one example.com/rack, so Kueue spread it over 2" in cond(plan, c.ADMITTED)["message"]


def test_a_clusterqueue_of_tas_flavors_only_places_a_job_that_asked_nothing_unconstrained():
    wl = workload(GPU, status=with_assignment(admitted(), hosts_assignment("node-1", "node-2")))
    placement = kueue.placement_of(kueue.view_of(wl), {})
    assert placement.annotations["kueue.x-k8s.io/podset-unconstrained-topology"] == "true"
    assert placement.scheduling_gates == ("kueue.x-k8s.io/topology",)
    plain = kueue.placement_of(kueue.view_of(workload(GPU, status=admitted())), {})
    assert (plain.scheduling_gates, plain.annotations) == ((), {})


def test_a_topology_nothing_here_places_by_waits_and_says_the_fix():
    for joined, fix in ((Unqueued(), "add the label kueue.x-k8s.io/queue-name"),
                        (QueueIgnored(queue="team-a"), "run it with DISTTRAIN_KUEUE")):
        plan = decide(dataclasses.replace(state(None, **RACK_JOB), joined=(joined,)), [], NOW, POLICY)
        assert plan.create == [] and plan.status.phase == "Pending"
        running = cond(plan, c.RUNNING)
        assert running["reason"] == c.TOPOLOGY_UNPLACED and fix in running["message"]
        assert running["message"].startswith("spec.scheduling.topology (example.com/rack) is placed by Kueue's")
        assert [e.reason for e in plan.events] == [c.TOPOLOGY_UNPLACED]


def test_an_elastic_jobs_growth_slice_asks_for_the_same_topology():
    spec = {**GPU, "nodes": 4, "minNodes": 2, "maxNodes": 4, "scheduling": {"topology": {"required": RACK}}}
    body = workload(spec, growth=kueue.Slice(number=1, replaces="distributedtraining-demo-0b5c6"))
    (pod_set,) = body["spec"]["podSets"]
    assert pod_set["topologyRequest"] == {"required": RACK, "podIndexLabel": "disttrain.dev/worker-index"}
    assert pod_set["count"] == 4 and "minCount" not in pod_set


def test_status_shows_where_the_workers_were_placed_in_one_line():
    from datetime import datetime, timezone

    from disttrain.client.jobview import status_lines, view_of

    job = {"metadata": {"name": "llm", "namespace": "team-a"}, "status": {"phase": "Running", "admission": {
        "clusterQueue": "cq", "topology": {"level": RACK, "domainCount": 1, "hosts": 4,
                                           "domains": [{"name": "b0-r2", "workers": 8}]}}}}
    lines = status_lines(view_of(job), [], datetime.now(timezone.utc))
    assert "Placement:   1 example.com/rack: b0-r2 (8 workers), on 4 hosts" in lines
