"""What the operator needs to know about one worker pod, read from its manifest (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from .api.names import CONTAINER_NAME, INDEX_LABEL
from .render import TEMPLATE_HASH_ANNOTATION

# Pod status reasons Kubernetes uses when the node, not the trainer, ended the pod.
DISRUPTION_REASONS = frozenset({"Evicted", "Preempting", "Shutdown", "Terminated", "NodeLost",
                                "NodeAffinity", "OutOfcpu", "OutOfmemory", "UnexpectedAdmissionError"})


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

    @property
    def active(self) -> bool:
        return self.phase in ("Pending", "Running", "Unknown") and not self.terminating

    @property
    def failed(self) -> bool:
        return self.phase == "Failed"

    @property
    def succeeded(self) -> bool:
        return self.phase == "Succeeded"

    def describe_failure(self) -> str:
        code = f"exit code {self.exit_code}" if self.exit_code is not None else "no exit code"
        return f"{self.name} failed: {self.reason or 'Error'} ({code})"


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
    return PodInfo(
        name=meta.get("name", ""),
        index=int(index) if isinstance(index, str) and index.isdigit() else None,
        phase=phase,
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp")),
        disrupted=phase == "Failed" and (reason in DISRUPTION_REASONS
                                         or disruption.get("status") == "True"),
        exit_code=exit_code,
        reason=reason,
        template_hash=(meta.get("annotations") or {}).get(TEMPLATE_HASH_ANNOTATION),
        ip=status.get("podIP"),
    )


def _terminated(status: Mapping[str, Any]) -> dict:
    for container in status.get("containerStatuses") or []:
        if container.get("name") == CONTAINER_NAME:
            return (container.get("state") or {}).get("terminated") or {}
    return {}
