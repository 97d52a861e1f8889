"""What the operator needs to know about one worker pod, read from its manifest (pure).

Only these few fields are kept per pod (not the manifest), so the operator's memory
grows with the number of pods by a few hundred bytes each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from disttrain.api.names import CONTAINER_NAME, INDEX_LABEL
from disttrain.render import TEMPLATE_HASH_ANNOTATION
from disttrain.api.pod_contract import INTERRUPTED
from disttrain.api.report import TrainerReport, parse_report

# Pod status reasons Kubernetes uses when the node, not the trainer, ended the pod.
DISRUPTION_REASONS = frozenset({"Evicted", "Preempting", "Shutdown", "Terminated", "NodeLost",
                                "NodeAffinity", "OutOfcpu", "OutOfmemory", "UnexpectedAdmissionError"})
# A container waiting for these cannot start until the image (or its name) is fixed.
IMAGE_PULL_REASONS = frozenset({"ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull",
                                "RegistryUnavailable"})
# ... and these until a Secret or ConfigMap it refers to (checkpoint.secretRef, env) exists.
CONFIG_ERROR_REASONS = frozenset({"CreateContainerConfigError"})


@dataclass(frozen=True, slots=True)
class PodInfo:
    name: str
    index: int | None
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    ready: bool
    terminating: bool
    disrupted: bool  # evicted or preempted: recreated without spending backoffLimit
    exit_code: int | None
    reason: str  # why it terminated, for messages (OOMKilled, Error, Evicted, ...)
    template_hash: str | None
    ip: str | None
    uid: str | None = None
    owner_uid: str | None = None  # the controlling owner's uid: whose child this pod is
    report: TrainerReport | None = None  # the trainer's termination message, once ended
    unschedulable: str = ""  # the scheduler's message while it cannot place the pod
    last_words: str = ""  # the end of a failed container's termination message (its log tail)
    node: str = ""  # spec.nodeName
    ended_at: str | None = None  # the trainer container's finishedAt
    # The DisruptionTarget condition's reason (EvictionByEvictionAPI, PreemptionByScheduler,
    # DeletionByTaintManager, TerminationByKubelet, ...): who is ending the pod, and why.
    disruption: str = ""
    message: str = ""  # the cluster's words about the pod: status.message, else DisruptionTarget's
    image_pull: str = ""  # "ErrImagePull: ..." while the trainer container waits for its image
    config_error: str = ""  # "CreateContainerConfigError: secret ... not found" while it waits for one

    @property
    def active(self) -> bool:
        return self.phase in ("Pending", "Running", "Unknown") and not self.terminating

    @property
    def failed(self) -> bool:
        return self.phase == "Failed"

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"

    @property
    def finished(self) -> bool:
        """Training reached its end here (the success contract, docs/pod-contract.md):
        exit 0, not while being deleted, and the built-in trainer (if it reported) says
        Finished. A user's script that exits 0 without a signal is finished too."""
        return (self.succeeded and not self.disrupted
                and (self.report is None or self.report.finished))

    @property
    def ended_early(self) -> bool:
        """Ended without finishing: a crash, or a disruption."""
        return (self.failed or self.succeeded) and not self.finished

    def describe_failure(self) -> str:
        code = f"exit code {self.exit_code}" if self.exit_code is not None else "no exit code"
        tail = f": {self.last_words}" if self.last_words else ""
        return f"{self.name} failed: {self.reason or 'Error'} ({code}){tail}"


def summarize_pod(pod: Mapping[str, Any]) -> PodInfo:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    labels = meta.get("labels") or {}
    index = labels.get(INDEX_LABEL)
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = (conditions.get("Ready") or {}).get("status") == "True"
    disruption = conditions.get("DisruptionTarget") or {}
    reason = status.get("reason") or ""
    terminated = _terminated(status)
    exit_code = terminated.get("exitCode") if terminated else None
    if terminated and not reason:
        reason = terminated.get("reason") or ""
    phase = status.get("phase") or "Pending"
    report = parse_report(terminated.get("message")) if terminated else None
    terminating = bool(meta.get("deletionTimestamp"))
    scheduled = conditions.get("PodScheduled") or {}
    unschedulable = (scheduled.get("message") or "Unschedulable") if (
        scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable") else ""
    ended = phase in ("Succeeded", "Failed")
    disrupting = disruption.get("status") == "True"
    return PodInfo(
        name=meta.get("name", ""),
        index=int(index) if isinstance(index, str) and index.isdigit() else None,
        phase=phase,
        ready=ready,
        terminating=terminating,
        # The node, the cluster or a deletion ended it, or the trainer stopped on a
        # signal (its own or a peer's) after a checkpoint: not the trainer's fault.
        disrupted=ended and (reason in DISRUPTION_REASONS or disruption.get("status") == "True"
                             or terminating or (report is not None and report.outcome == INTERRUPTED)),
        exit_code=exit_code,
        reason=reason,
        template_hash=(meta.get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION),
        ip=status.get("podIP"),
        uid=meta.get("uid"),
        owner_uid=controller_uid(meta),
        report=report,
        unschedulable=unschedulable,
        last_words=_last_line(terminated.get("message")) if phase == "Failed" and report is None else "",
        node=(pod.get("spec") or {}).get("nodeName") or "",
        ended_at=terminated.get("finishedAt") if terminated else None,
        disruption=(disruption.get("reason") or "") if disrupting else "",
        message=_capped(status.get("message") or (disruption.get("message") if disrupting else "")),
        image_pull=_waiting_for(status, IMAGE_PULL_REASONS, "the image cannot be pulled"),
        config_error=_waiting_for(status, CONFIG_ERROR_REASONS, "a Secret or ConfigMap it refers to is missing"),
    )


def _capped(text: object, limit: int = 300) -> str:
    return " ".join(text.split())[:limit] if isinstance(text, str) else ""


def _waiting_for(status: Mapping[str, Any], reasons: frozenset[str], default: str) -> str:
    """"REASON: message" while the trainer container waits for one of `reasons`."""
    for container in status.get("containerStatuses") or []:
        if container.get("name") == CONTAINER_NAME:
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason") or ""
            if reason in reasons:
                return _capped(f"{reason}: {waiting.get('message') or default}")
    return ""


def _last_line(message: object, limit: int = 300) -> str:
    """The last non-empty line of a log tail (usually the exception), capped."""
    if not isinstance(message, str):
        return ""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[-1][-limit:] if lines else ""


def controller_uid(meta: Mapping[str, Any]) -> str | None:
    """The uid of an object's controlling owner (whose child it is), from its metadata."""
    for ref in meta.get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def _terminated(status: Mapping[str, Any]) -> dict:
    for container in status.get("containerStatuses") or []:
        if container.get("name") == CONTAINER_NAME:
            return (container.get("state") or {}).get("terminated") or {}
    return {}
