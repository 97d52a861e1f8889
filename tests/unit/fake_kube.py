"""A stand-in for kube.Kube in the shell's unit tests, which run on a fake clock: the real
API server cannot follow a fake clock, so these tests record the calls the shell makes
and answer from a dict. Everything the calls do to a real API server (RBAC, conflicts,
the watch) is proven in tests/cluster against the real control plane."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import AsyncIterator
from typing import Any

from disttrain.operator.kube import ApiError, Created, kind_of


class FakeKube:
    def __init__(self, jobs: dict[tuple[str, str], str] | None = None):
        self.jobs = dict(jobs or {})  # (namespace, name) -> uid: the jobs that exist
        self.objects: dict[tuple[str, str, str], dict] = {}  # (kind, namespace, name) -> object
        self.calls: list[tuple[str, ...]] = []
        self.routine_writes: list[str] = []  # status patches sent as pacing.ROUTINE
        self.batches: list[list[int]] = []  # per creating() batch: [writes paid for, creates sent]
        self._batch: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("batch", default=None)
        self.fail: dict[str, ApiError] = {}  # verb -> raised once per call while set
        self.reports: dict[str, dict] = {}  # pod ip -> its /status
        # pod ip -> the answer to POST /checkpoint: (report, None) taken, (None, why) refused
        self.checkpoint_answers: dict[str, tuple[dict | None, str | None]] = {}
        # What discovery lists, as group/version/plural (a 1.37 API server with GenericWorkload on).
        self.served_resources: set[str] = {"scheduling.k8s.io/v1beta1/podgroups"}

    def _maybe_fail(self, verb: str) -> None:
        if verb in self.fail:
            raise self.fail[verb]

    @contextlib.asynccontextmanager
    async def creating(self, count: int) -> AsyncIterator[None]:
        batch = [count, 0]
        self.batches.append(batch)
        reset = self._batch.set(batch)
        try:
            yield
        finally:
            self._batch.reset(reset)

    async def job_uid(self, namespace: str, name: str) -> str | None:
        self.calls.append(("get-job", namespace, name))
        return self.jobs.get((namespace, name))

    async def served(self, group: str, version: str, plural: str) -> bool:
        self.calls.append(("discover", f"{group}/{version}", plural))
        return f"{group}/{version}/{plural}" in self.served_resources

    async def get(self, namespace: str, kind: str, name: str) -> dict | None:
        self.calls.append(("get", kind, name))
        return self.objects.get((kind, namespace, name))

    async def create(self, obj: dict) -> Created:
        meta = obj["metadata"]
        self.calls.append(("create", obj["kind"], meta["name"]))
        if (batch := self._batch.get()) is not None:
            batch[1] += 1
        self._maybe_fail("create")
        key = (kind_of(obj), meta["namespace"], meta["name"])
        if key in self.objects:
            return Created(created=False, existing=self.objects[key])
        self.objects[key] = {**obj, "metadata": {**meta, "resourceVersion": "1"}}
        return Created(created=True)

    async def replace(self, obj: dict) -> dict | None:
        """PUT with optimistic concurrency: None (a 409) when the resourceVersion is stale."""
        meta = obj["metadata"]
        self.calls.append(("replace", obj["kind"], meta["name"]))
        self._maybe_fail("replace")
        key = (obj["kind"], meta["namespace"], meta["name"])
        current = self.objects.get(key)
        if current is None or current["metadata"]["resourceVersion"] != meta.get("resourceVersion"):
            return None
        stored = {**obj, "metadata": {**meta, "resourceVersion": str(int(meta["resourceVersion"]) + 1)}}
        self.objects[key] = stored
        return stored

    async def delete_pod(self, namespace: str, name: str, uid: str | None, *, force: bool = False) -> None:
        self.calls.append(("force-delete" if force else "delete", "Pod", name))
        self.objects.pop(("Pod", namespace, name), None)

    async def patch_status(self, namespace: str, name: str, patch: dict, routine: bool = False) -> dict:
        self.calls.append(("patch-status", name, *sorted(patch)))
        if routine:
            self.routine_writes.append(name)
        self._maybe_fail("patch-status")
        return {}

    async def delete_job(self, namespace: str, name: str) -> None:
        self.calls.append(("delete-job", namespace, name))
        self.jobs.pop((namespace, name), None)

    async def post_event(self, involved: dict, type_: str, reason: str, message: str, when: str) -> None:
        self.calls.append(("event", reason))

    async def trainer_status(self, ip: str, port: int) -> dict | None:
        self.calls.append(("status", ip))
        return self.reports.get(ip)

    async def trainer_checkpoint(self, ip: str, port: int, token: str, hold: int,
                                 wait: float) -> tuple[dict | None, str | None, bool]:
        self.calls.append(("checkpoint", ip, token, str(hold), str(wait)))
        report, why = self.checkpoint_answers.get(ip, (None, "POST /checkpoint failed: ClientConnectorError"))
        return report, why, report is not None or why.startswith("HTTP")

    def verbs(self, *kinds: str) -> list[tuple[str, ...]]:
        return [c for c in self.calls if c[0] in kinds]
