"""Leader election on a coordination.k8s.io/v1 Lease, the way Kubernetes' own controllers
and controller-runtime elect one active replica (client-go's leaderelection package).

Every replica watches and keeps its caches warm; only the holder of the Lease runs the
workers. The holder renews the Lease every `retry_seconds`; a replica that cannot renew
within `renew_deadline_seconds` stops leading (the operator then exits, and its Pod
restarts as a standby). Another replica takes the Lease once it has seen the same record
unchanged for `lease_seconds` (measured on its own clock, never by comparing clocks of
two machines). A replica that stops cleanly releases the Lease, and a standby takes over
at its next try.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from disttrain.operator.clock import Clock
from disttrain.operator.kube import ApiError, Kube

log = logging.getLogger("disttrain.leader")


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    namespace: str
    name: str = "disttrain-operator"
    identity: str = ""
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0


def default_identity() -> str:
    """The Pod's name (its hostname) plus a random suffix, as client-go's callers do:
    unique even when a Pod restarts under the same name."""
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def micro_time(moment: datetime) -> str:
    """metav1.MicroTime, as the API server writes it."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, kube: Kube, settings: LeaseSettings, clock: Clock | None = None):
        self.kube, self.settings, self.clock = kube, settings, clock or Clock()
        self.identity = settings.identity or default_identity()
        self.leading = asyncio.Event()
        self._observed: tuple[Any, ...] | None = None  # the holder's record as last read
        self._observed_at = 0.0  # when it last changed (our monotonic clock)
        self._renewed_at = 0.0

    async def run(self) -> None:
        """Acquire, then renew until the Lease is lost; returns when leadership is lost.
        Cancel it to stop: a leader then releases the Lease."""
        s = self.settings
        try:
            while not self.leading.is_set():
                if await self._try():
                    self.leading.set()
                    self._renewed_at = self.clock.monotonic()
                    log.info("leading: holding Lease %s/%s as %s", s.namespace, s.name, self.identity)
                    break
                await self.clock.sleep(s.retry_seconds)
            while True:
                await self.clock.sleep(s.retry_seconds)
                if await self._try():
                    self._renewed_at = self.clock.monotonic()
                elif self.clock.monotonic() - self._renewed_at > s.renew_deadline_seconds:
                    log.error("lost the Lease %s/%s: not renewed for %.0fs", s.namespace, s.name,
                              s.renew_deadline_seconds)
                    self.leading.clear()
                    return
        except asyncio.CancelledError:
            if self.leading.is_set():
                await asyncio.shield(self._release())
            raise

    async def _try(self) -> bool:
        """One attempt to take or renew the Lease; True while we hold it."""
        s, now = self.settings, self.clock.now()
        try:
            lease = await self.kube.get(s.namespace, "Lease", s.name)
            if lease is None:
                created = await self.kube.create(self._lease(None, now, transitions=0))
                return created.created
            spec = lease.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"), spec.get("leaseTransitions"))
            if record != self._observed:
                self._observed, self._observed_at = record, self.clock.monotonic()
            duration = float(spec.get("leaseDurationSeconds") or s.lease_seconds)
            if holder and holder != self.identity and self.clock.monotonic() - self._observed_at < duration:
                return False  # someone else holds it, and renewed it within its duration
            transitions = int(spec.get("leaseTransitions") or 0) + (0 if holder == self.identity else 1)
            replaced = await self.kube.replace(self._lease(lease, now, transitions,
                                                           acquired=spec.get("acquireTime")
                                                           if holder == self.identity else None))
            return replaced is not None
        except ApiError as exc:
            log.warning("Lease %s/%s: %s", s.namespace, s.name, exc)
            return False

    async def _release(self) -> None:
        """Hand the Lease back at once (client-go's ReleaseOnCancel)."""
        s = self.settings
        try:
            lease = await self.kube.get(s.namespace, "Lease", s.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            released = self._lease(lease, self.clock.now(), int((lease["spec"]).get("leaseTransitions") or 0))
            released["spec"].update(holderIdentity="", leaseDurationSeconds=1)
            await self.kube.replace(released)
            log.info("released the Lease %s/%s", s.namespace, s.name)
        except ApiError as exc:
            log.warning("could not release the Lease %s/%s: %s", s.namespace, s.name, exc)

    def _lease(self, current: dict[str, Any] | None, now: datetime, transitions: int,
               acquired: str | None = None) -> dict[str, Any]:
        s = self.settings
        metadata: dict[str, Any] = {"name": s.name, "namespace": s.namespace}
        if current is not None:
            metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(s.lease_seconds),
                         "acquireTime": acquired or micro_time(now), "renewTime": micro_time(now),
                         "leaseTransitions": transitions}}
