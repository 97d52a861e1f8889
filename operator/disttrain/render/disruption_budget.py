"""A PodDisruptionBudget per job, so that a node drain waits for the operator.

`kubectl drain` (and the cluster autoscaler) evict pods through the Eviction API, which
honours PodDisruptionBudgets. With none, a drained worker gets SIGTERM at once and the job
keeps what the trainer saved in its grace period. With `maxUnavailable: 0` the eviction is
refused (429) and retried by the drain, while the operator, which sees the node cordoned,
runs checkpoint-then-evict (eviction.py): it asks the trainer for a checkpoint of the step
it is on, then deletes the workers (a deletion is not an eviction) and recreates them on
other nodes; the drain then finds the node empty. Pods that are not Ready may always be
evicted (unhealthyPodEvictionPolicy), so a broken worker never blocks a drain.

None when spec.checkpoint.evictGraceSeconds is 0: no handshake, nothing to wait for.
"""

from __future__ import annotations

from disttrain.api import types as t
from disttrain.api.names import service_name
from disttrain.render.context import child_metadata, worker_selector


def render_disruption_budget(job: t.Job) -> dict | None:
    if not job.spec.checkpoint.evict_grace_seconds:
        return None
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": child_metadata(job, service_name(job.name)),
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": worker_selector(job)},
                     "unhealthyPodEvictionPolicy": "AlwaysAllow"}}
