"""Where and on what a job's workers run, as typed dataclasses (part of the spec of
api/types.py): the scheduler and its gang, the network topology Kueue places by, the DRA
devices and NVIDIA's ComputeDomain. Integrations (integrations/) carry each out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from disttrain.api.k8s import AFFINITY, TOLERATION
from disttrain.api.limits import MAX_GPUS_PER_NODE, MAX_NODES
from disttrain.api.meta import DNS1123_SUBDOMAIN, spec_field


@dataclass(kw_only=True, slots=True)
class Gang:
    """gang: all-or-nothing placement of the workers through a PodGroup."""

    schedule_timeout_seconds: int | None = spec_field(
        "scheduleTimeoutSeconds: how long the gang scheduler lets the first workers wait for "
        "the rest (minNodes in all) before it releases them and tries the gang again later "
        "(the coscheduling PodGroup's scheduleTimeoutSeconds; kube-scheduler's own gang waits "
        "5 minutes, which is not configurable).", default=60, minimum=1, maximum=86400)


# A node label key, as a Kueue Topology level names one (its API allows 63 characters).
LABEL_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"


@dataclass(kw_only=True, slots=True)
class Topology:
    """topology: where the workers must or should stay together, as node-label levels of the
    cluster's Kueue Topology (block, rack, host ...). Kueue's Topology-Aware Scheduling picks
    the domains when it admits the job: the job needs a Kueue LocalQueue whose ClusterQueue
    has a ResourceFlavor with a topologyName (docs/placement.md)."""

    required: str | None = spec_field(
        "required: a level's node label (e.g. example.com/rack): every worker in one domain of "
        "that level, or the job waits in its queue with Kueue's reason.", max_length=63, pattern=LABEL_KEY,
        pattern_hint="a node label key, e.g. example.com/rack")
    preferred: str | None = spec_field(
        "preferred: a level's node label: the workers in one domain of that level when they fit, "
        "else in as few domains of the levels above as Kueue finds.", max_length=63, pattern=LABEL_KEY,
        pattern_hint="a node label key, e.g. example.com/block")
    slice_required: str | None = spec_field(
        "sliceRequired: for a job larger than one domain: each slice of sliceSize workers (by "
        "index: workers 0..sliceSize-1, then the next) in one domain of this level.", max_length=63,
        pattern=LABEL_KEY, pattern_hint="a node label key, e.g. example.com/rack")
    slice_size: int | None = spec_field(
        "sliceSize: workers per slice (with sliceRequired); nodes, minNodes and maxNodes are "
        "multiples of it.", minimum=1, maximum=MAX_NODES)


@dataclass(kw_only=True, slots=True)
class Scheduling:
    """scheduling: where worker pods may run."""

    scheduler_name: str | None = spec_field(
        "schedulerName: a custom scheduler (e.g. volcano, or one running the coscheduling plugin); "
        "with gang it picks the PodGroup's kind.",
        max_length=253)
    priority_class_name: str | None = spec_field(
        "priorityClassName: PriorityClass of the worker pods.", max_length=253)
    node_selector: dict[str, str] | None = spec_field(
        "nodeSelector: node labels every worker pod requires.", max_items=64)
    tolerations: list[dict[str, Any]] | None = spec_field(
        "tolerations: Kubernetes tolerations of the worker pods (e.g. for GPU taints).",
        max_items=64, free_form=True, k8s=TOLERATION)
    affinity: dict[str, Any] | None = spec_field(
        "affinity: Kubernetes affinity of the worker pods.", free_form=True, k8s=AFFINITY)
    gang: Gang | None = spec_field(
        "gang: place the workers all or nothing, so that no worker holds GPUs while another "
        "cannot be placed. The operator creates a PodGroup owned by the job (at least minNodes "
        "at once) and puts every worker in it, of the kind schedulerName reads: without "
        "schedulerName, kube-scheduler's own scheduling.k8s.io/v1beta1 PodGroup (Kubernetes "
        "1.37+ with the GenericWorkload feature gate; the job waits, GangNotServed, where it "
        "is not served); volcano: scheduling.volcano.sh; any other name: scheduling.x-k8s.io, "
        "for the coscheduling plugin of scheduler-plugins.")
    topology: Topology | None = spec_field(
        "topology: keep the workers inside one domain of the cluster's network topology (a "
        "rack, a block), through Kueue's Topology-Aware Scheduling; needs the job in a Kueue queue.")


@dataclass(kw_only=True, slots=True)
class Devices:
    """devices: each worker's GPUs through Dynamic Resource Allocation (Kubernetes 1.34+): a
    DeviceClass, a count and CEL selectors, instead of gpusPerNode's extended-resource count.
    The operator makes one ResourceClaimTemplate per job and each worker gets a claim of its
    own (docs/placement.md)."""

    class_name: str | None = spec_field(
        "className: the DeviceClass the devices come from (e.g. gpu.nvidia.com).", required=True,
        max_length=253, pattern=DNS1123_SUBDOMAIN)
    count: int | None = spec_field(
        "count: devices per worker; processes per worker follow it as they follow gpusPerNode.",
        required=True, minimum=1, maximum=MAX_GPUS_PER_NODE,
        maximum_reason="no machine has more GPUs; the count is per worker pod, not per job")
    selectors: list[str] | None = spec_field(
        "selectors: CEL expressions every device must meet, e.g. "
        "device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA H100 80GB HBM3\".", max_items=8,
        max_length=4096)


ComputeDomainChannels = Literal["Single", "All"]


@dataclass(kw_only=True, slots=True)
class ComputeDomain:
    """computeDomain: the workers share one NVIDIA ComputeDomain (multi-node NVLink on GB200
    and similar racks), which NVIDIA's DRA driver must serve (docs/placement.md)."""

    allocation_mode: ComputeDomainChannels | None = spec_field(
        "allocationMode: Single (one IMEX channel per worker) or All (every channel of the domain).",
        default="Single")
