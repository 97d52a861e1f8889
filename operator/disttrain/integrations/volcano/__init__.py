"""Volcano's queues: a gang-scheduled job for Volcano is placed in the queue its label
names (docs/architecture.md, "Integrations", walks through how this one was added)."""

from disttrain.integrations.volcano.queue import VolcanoQueue

__all__ = ["VolcanoQueue"]
