"""The headless Service that gives every worker pod a stable DNS name."""

from __future__ import annotations

from disttrain.api import types as t
from disttrain.api.names import service_name
from disttrain.render.context import child_metadata, worker_selector


def render_service(job: t.Job) -> dict:
    spec = job.spec
    return {"apiVersion": "v1", "kind": "Service", "metadata": child_metadata(job, service_name(job.name)), "spec": {
        "clusterIP": "None",
        # Rendezvous happens before any trainer is ready: DNS must resolve from the start.
        "publishNotReadyAddresses": True,
        "selector": worker_selector(job),
        "ports": [
            {"name": "rendezvous", "port": spec.rendezvous.port, "targetPort": spec.rendezvous.port},
            {"name": "metrics", "port": spec.metrics.port, "targetPort": spec.metrics.port},
        ],
    }}
