"""Gang scheduling: the PodGroup of a job with spec.scheduling.gang (pod_group.py renders it
and puts each worker in it), created before any worker by the shell."""

from disttrain.integrations.gang.integration import Gang

__all__ = ["Gang"]
