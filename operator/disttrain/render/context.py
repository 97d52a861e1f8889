"""What every render pass reads: the job, its resolved topology, the pod's index."""

from __future__ import annotations

from dataclasses import dataclass

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.api.names import JOB_LABEL, ROLE_LABEL


# Long enough for an emergency checkpoint on SIGTERM (docs/trainer.md).
TERMINATION_GRACE_SECONDS = 180
# torchrun waits this long for its workers' emergency checkpoint before SIGKILL, leaving
# itself time to exit inside the pod's grace period.
SHUTDOWN_TIMEOUT_SECONDS = TERMINATION_GRACE_SECONDS - 10
# Where the trainer writes its final report; the kubelet hands it to the operator.
TERMINATION_LOG = "/dev/termination-log"


@dataclass(frozen=True, slots=True)
class RenderContext:
    job: t.Job
    resolved: Resolved
    index: int = 0
    avoid_nodes: tuple[str, ...] = ()  # nodes this worker must not be placed on (status.avoidedNodes)
    # An admission's flavors (integrations' Placement): their node labels and tolerations.
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[dict, ...] = ()

    @property
    def spec(self) -> t.DistributedTrainingSpec:
        return self.job.spec

    @property
    def namespace(self) -> str:
        return self.job.namespace or "default"

    @property
    def builtin(self) -> t.BuiltinTrainer | None:
        return self.job.spec.trainer.builtin


def common_labels(job: t.Job) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "disttrain",
        "app.kubernetes.io/instance": job.name,
        "app.kubernetes.io/managed-by": "disttrain-operator",
        "app.kubernetes.io/part-of": "disttrain",
        JOB_LABEL: job.name,
    }


def worker_selector(job: t.Job) -> dict[str, str]:
    return {JOB_LABEL: job.name, ROLE_LABEL: "worker"}


def child_metadata(job: t.Job, name: str) -> dict:
    """metadata of one of the job's children: its name, the job's labels, owned by the job."""
    meta: dict = {"name": name, "namespace": job.namespace or "default", "labels": common_labels(job)}
    owners = owner_references(job)
    if owners:
        meta["ownerReferences"] = owners
    return meta


def owner_references(job: t.Job) -> list[dict]:
    """Owner reference to the job, so the garbage collector removes children with it.
    Left out when the job has no uid yet (offline `disttrain render`)."""
    if not job.uid:
        return []
    return [{"apiVersion": t.API_VERSION, "kind": t.KIND, "name": job.name, "uid": job.uid,
             "controller": True, "blockOwnerDeletion": True}]
