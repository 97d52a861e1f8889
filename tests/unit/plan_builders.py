"""Builders shared by the tests of plan.decide and what it reads: a job, its pods as the API
server reports them, the trainer's reports, the moment of the pass."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from disttrain.api import conditions as c
from disttrain.api import load_job, validate_document
from disttrain.api.names import CONTAINER_NAME
from disttrain.operator.core.state import JobState, Policy
from disttrain.api.times import iso
from disttrain.operator.core.nodes import NodeHealth, summarize_node
from disttrain.operator.core.plan import decide
from disttrain.operator.core.pods import PodInfo, summarize_pod
from disttrain.render import render_pod

from .helpers import job as job_doc
from .helpers import typed, written

NOW = datetime(2026, 11, 22, 12, 0, 0, tzinfo=timezone.utc)


POLICY = Policy(backoff_base_seconds=10, backoff_max_seconds=300)


def state(status=None, **spec):
    doc = job_doc(**spec)
    return JobState(name="demo", namespace="team-a", generation=3, status=typed(status),
                    validation=validate_document(doc))


def pod(index, phase="Running", ready=True, exit_code=None, reason=None, terminating=False,
        disrupted=False, **spec):
    """A pod as the API server would report it, rendered from the same spec."""
    j, r, _ = load_job(job_doc(**spec))
    body = render_pod(j, r, index)
    status = {"phase": phase, "podIP": f"10.0.0.{index}",
              "conditions": [{"type": "Ready", "status": "True" if ready and phase == "Running" else "False"}]}
    if exit_code is not None:
        status["containerStatuses"] = [{"name": CONTAINER_NAME, "state": {"terminated": {
            "exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0 else "Error")}}}]
    if disrupted:
        status["reason"] = "Evicted"
    if terminating:
        body["metadata"]["deletionTimestamp"] = iso(NOW)
    body["status"] = status
    return summarize_pod(body)


def run(st, pods, now=NOW):
    return decide(st, pods, now, POLICY)


def cond(plan, type_):
    """A condition of the plan's status as written (JSON), or None."""
    found = c.get_condition(plan.status.conditions, type_)
    return written(found) if found is not None else None


# Without guardrail warnings (with more than one node; one node also needs a claim), so that
# the Events of a pass are only the rule's own.
QUIET = {"trainer": {"builtin": {}}}


# Two independent semantic errors: the validator reports both, joined by "; ".
TWO_ERRORS = {"nodes": 3, "maxNodes": 2, "env": [{"name": "MASTER_ADDR", "value": "x"}]}


def at(seconds: float):
    return NOW + timedelta(seconds=seconds)


def events(plan):
    return [(e.type, e.reason, e.message) for e in plan.events]


CKPT = {"nodes": 1, "checkpoint": {"intervalSteps": 10}, **QUIET}


RUNNING = {"phase": "Running", "startTime": iso(NOW), "restarts": 0}


DISRUPTIONS = [
    pytest.param({"disruption": "PreemptionByScheduler"}, id="DisruptionTarget-preempted-by-scheduler"),
    pytest.param({"disruption": "DeletionByTaintManager"}, id="DisruptionTarget-taint-manager"),
    pytest.param({"disruption": "EvictionByEvictionAPI"}, id="DisruptionTarget-eviction-api"),
    pytest.param({"disruption": "TerminationByKubelet", "reason": "Terminated"}, id="node-shutdown"),
    pytest.param({"reason": "Shutdown"}, id="graceful-node-shutdown"),
    pytest.param({"reason": "Preempting"}, id="preempted-by-kubelet"),
    pytest.param({"reason": "Evicted"}, id="evicted"),
]


def report_json(outcome=None, step=60, total=60, ckpt=60) -> str:
    return json.dumps({"step": step, "totalSteps": total, "loss": 2.5, "samplesPerSecond": 40.0,
                       "stepSeconds": 0.2, "worldSize": 2, "lastUpdateTime": iso(NOW), "outcome": outcome,
                       "checkpoint": {"step": ckpt, "time": iso(NOW), "path": f"/ck/step-{ckpt:08d}"}})


def ended(index, code, message=None, terminating=False, nodes=2, reason=None):
    """A worker pod that ended with `code` and the termination message `message`."""
    j, r, _ = load_job(job_doc(nodes=nodes))
    body = render_pod(j, r, index)
    terminated = {"exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error")}
    if message is not None:
        terminated["message"] = message
    body["status"] = {"phase": "Succeeded" if code == 0 else "Failed",
                      "containerStatuses": [{"name": CONTAINER_NAME, "state": {"terminated": terminated}}]}
    if terminating:
        body["metadata"]["deletionTimestamp"] = iso(NOW)
    return summarize_pod(body)


def terminated(**state) -> dict:
    return {"containerStatuses": [{"name": CONTAINER_NAME, "state": {"terminated": state}}]}


def ready(name, index, ip="10.0.0.1", is_ready=True):
    return PodInfo(name=name, index=index, phase="Running", ready=is_ready, terminating=False, disrupted=False,
                   exit_code=None, reason="", template_hash=None, ip=ip)


def ready_node(name: str, conditions=(), taints=(), gpus: str = "2") -> NodeHealth:
    """A node Ready for an hour, with its other conditions, taints and GPUs allocatable."""
    return summarize_node({
        "metadata": {"name": name}, "spec": {"taints": list(taints)},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": iso(at(-3600))},
                                  *conditions],
                   "allocatable": {"cpu": "8", "nvidia.com/gpu": gpus}}})


def worker_on(index: int, node_name: str, spec: dict) -> PodInfo:
    """Worker `index` of a job with `spec`, as rendered, Running and Ready on `node_name`."""
    j, r, _ = load_job(job_doc(**spec))
    body = render_pod(j, r, index)
    body["metadata"]["uid"] = f"uid-{index}"
    body["spec"]["nodeName"] = node_name
    body["status"] = {"phase": "Running", "podIP": f"10.0.0.{index}", "conditions": [{"type": "Ready", "status": "True"}]}
    return summarize_pod(body)
