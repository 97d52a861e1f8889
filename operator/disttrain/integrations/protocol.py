"""What an integration can do for a job, named once.

An integration is a controller disttrain cooperates with (Kueue's quota, a gang
scheduler's PodGroups, Volcano's queues ...). It lives in its own folder under
integrations/ and is one line of registry.py; the controller, the handlers, the
permissions table and `disttrain render` know this protocol, never an integration's name.

  declared   `paths`          where the API serves the kinds it reads and writes
             `uses`           its rows of the permissions table (operator/permissions.py),
                              which the shipped RBAC is checked against
             `crds`           the CRDs of what it watches: followed as they go and come back
             `refusal_hints`  the fix to name when the API refuses one of its children
             `settings`       its operator settings (fields of operator/settings.py's Settings)
             `causes`         the failure causes it records (of the API's FailureCause)
  offline    `queue_of`,      the queue that holds a job before any worker is created, and
             `held`           what `disttrain validate` says of a job held there
  watch      `watch`          kopf handlers for its own resources, registered before kopf
                              starts; an object that changes queues its job
             `attach`         the kopf indexes those handlers keep
  observe    `observe`        what a pass of `decide` needs of it for one job: a `Joined`
                              (operator/core/integration.py: hold, sized, suspended, tell,
                              lost_to), None when the job does not take part
  children   `children`       what it adds to the job's owned children, rendered (a PodGroup)
             `dress`          what it adds to each worker pod (the PodGroup it joins)
             `shape`          the job's owned children (rendered) adjusted
             `placement`      node labels and tolerations its admission puts the workers on
  carry out  `carry_out`      the `Step`s a pass asked of it, with the shell's API calls

An integration must answer `name`; every hook is an opt-in extra that does nothing by
default. An integration that needs a setting reads it in `of`.
The shell lends each hook what it may use (`Shell`): its API client, its clock, how to
say a refusal on the job and how to look at the job again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from disttrain.api import types as t
from disttrain.api.status_types import Resolved
from disttrain.operator.core.integration import Joined, Step
from disttrain.operator.core.state import JobState

Key = tuple[str, str]  # a job's (namespace, name)


@dataclass(frozen=True, slots=True)
class Use:
    """A row of the permissions table: `verbs` on `group`/`resource` in `scope`
    ("watched": each namespace the operator watches, "own": its namespace, "cluster")."""

    group: str
    resource: str
    verbs: str
    scope: str
    why: str


@dataclass(frozen=True, slots=True)
class Crd:
    """A CRD whose objects an integration watches."""

    group: str
    version: str
    plural: str

    @property
    def name(self) -> str:
        return f"{self.plural}.{self.group}"


@dataclass(frozen=True, slots=True)
class Setting:
    """An operator setting an integration declares: the field `name` of Settings, read from
    DISTTRAIN_<NAME> (a bool, int, float or str, as `default` is)."""

    name: str
    default: bool | int | float | str
    doc: str


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an admitted job's workers go: node labels and tolerations to add, how many
    workers were admitted (None: as many as the job asks), and what each worker carries for
    the controller that places it (labels, annotations, scheduling gates it lifts)."""

    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    count: int | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    scheduling_gates: tuple[str, ...] = ()

    def merged(self, other: Placement) -> Placement:
        """Both placements: `other`'s node labels, labels and annotations win."""
        return Placement(node_selector={**self.node_selector, **other.node_selector},
                         tolerations=(*self.tolerations, *(t for t in other.tolerations if t not in self.tolerations)),
                         count=other.count if other.count is not None else self.count,
                         labels={**self.labels, **other.labels}, annotations={**self.annotations, **other.annotations},
                         scheduling_gates=(*self.scheduling_gates,
                                           *(g for g in other.scheduling_gates if g not in self.scheduling_gates)))

    def mark(self, pod: dict) -> dict:
        """The worker pod with this placement's labels, annotations and scheduling gates
        (render_pod puts the node labels and tolerations in)."""
        if not (self.labels or self.annotations or self.scheduling_gates):
            return pod
        meta = pod.setdefault("metadata", {})
        meta["labels"] = {**(meta.get("labels") or {}), **self.labels}
        meta["annotations"] = {**(meta.get("annotations") or {}), **self.annotations}
        if self.scheduling_gates:
            spec = pod.setdefault("spec", {})
            have = [g.get("name") for g in spec.get("schedulingGates") or []]
            spec["schedulingGates"] = [*(spec.get("schedulingGates") or []),
                                       *({"name": g} for g in self.scheduling_gates if g not in have)]
        return pod


class Shell(Protocol):
    """What the controller lends an integration's shell hooks."""

    kube: Any  # operator/kube.py's Kube: get, create, patch, replace, delete (async)
    clock: Any  # operator/clock.py's Clock: monotonic(), now()
    integrations: tuple[Integration, ...]  # all of them, as configured (worker pods are dressed by each)

    async def create_or_refuse(self, record: Any, key: Key, body: dict, hints: Mapping[int, str]) -> bool:
        """Create `body`; a refusal of the API (not one of the API server's own errors,
        which fail the pass) is said on the job and tried again after the refusals'
        back-off. True: created now (False: refused, or it was there already)."""

    def refuse(self, record: Any, key: Key, what: str, code: int, reason: str, message: str,
               hints: Mapping[int, str]) -> None:
        """Say on the job that `what` could not be made, as for a refused creation."""

    def refused_lately(self, record: Any) -> bool:
        """A creation of the job was refused and its back-off has not run out."""

    def look_again(self, key: Key) -> None:
        """Queue the job for a pass soon (an object changed under us)."""


class Integration:
    """The protocol: override what the integration's controller needs."""

    name: ClassVar[str] = ""
    feature: ClassVar[str] = ""  # the install switch its RBAC ships behind (the chart's kueue.enabled); "": always
    uses: ClassVar[tuple[Use, ...]] = ()
    crds: ClassVar[tuple[Crd, ...]] = ()
    refusal_hints: ClassVar[Mapping[str, Mapping[int, str]]] = {}  # child kind -> HTTP status -> the fix
    # Where the API serves each kind it reads or writes: KIND.GROUP -> its path, "{ns}" for
    # the namespace of a namespaced kind (operator/kube.py).
    paths: ClassVar[Mapping[str, str]] = {}
    settings: ClassVar[tuple[Setting, ...]] = ()
    causes: ClassVar[tuple[str, ...]] = ()  # failure causes only it records (api/status_types.py's FailureCause)

    @classmethod
    def of(cls, settings: Any) -> Integration:
        """The integration as the operator's settings configure it."""
        return cls()

    @property
    def on(self) -> bool:
        """Whether it watches and may call the API (its `uses` are granted)."""
        return True

    @classmethod
    def queue_of(cls, labels: Mapping[str, str] | None) -> str | None:
        """The queue that holds a job with these labels before any worker is created."""
        return None

    @classmethod
    def held(cls, queue: str) -> str | None:
        """What `disttrain validate` says of a job it holds in `queue` (None: it holds none)."""
        return None

    def watch(self, queue_job: Callable[[Any, Key], None]) -> None:
        """Register kopf handlers; one that sees a change calls queue_job(memo, key)
        with the memo kopf gave it."""
        return None

    def attach(self, indices: Mapping[str, Any]) -> None:
        return None

    async def observe(self, shell: Shell, key: Key, view: Any) -> Joined | None:
        """`view`: the job as the watch delivered it (controller.WatchedJob: uid, labels,
        spec), read whether or not its spec validates."""
        return None

    def children(self, job: t.Job, resolved: Resolved) -> list[dict]:
        """What it adds to the job's owned children, after render_owned's (and before any pod)."""
        return []

    def dress(self, pod: dict, job: t.Job) -> dict:
        """What it adds to a worker pod render_pod made (a label, an annotation)."""
        return pod

    def shape(self, children: list[dict], job: t.Job) -> list[dict]:
        return children

    async def placement(self, shell: Shell, joined: Joined) -> Placement | None:
        return None

    async def carry_out(self, shell: Shell, record: Any, job: JobState, view: Any, joined: Joined,
                        steps: list[Step]) -> None:
        """Only called with this integration's own steps, when the job takes part."""
        return None


def dressed(pod: dict, job: t.Job, among: tuple[Integration, ...]) -> dict:
    """The worker pod with what each integration of `among` adds to it, in their order."""
    for integration in among:
        pod = integration.dress(pod, job)
    return pod
