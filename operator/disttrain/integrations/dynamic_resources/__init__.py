"""GPUs through Dynamic Resource Allocation: a job with spec.devices gets one
ResourceClaimTemplate, and each worker a claim of its own made from it (claim.py)."""

from disttrain.integrations.dynamic_resources.integration import DynamicResources

__all__ = ["DynamicResources"]
