"""Trials as DistributedTrainings in a cluster: create, watch status.progress (evalLoss,
evalMetrics, evalStep, written by the operator from the trainer's reports), delete when done.

A pruned trial's job is deleted: the operator deletes its pods gracefully and the trainer
writes an emergency checkpoint on SIGTERM. On an interrupt of the sweep the running
jobs are left alone; the next run finds them by name (409 on create) and watches on.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from disttrain.api.types import GROUP, PLURAL, VERSION
from disttrain.api.report import parse_report
from disttrain.sweep.runner import JobResult, Watch, finished, objective_points

DELETE_TIMEOUT_SECONDS = 300


class ClusterBackend:
    def __init__(self, api: Any, namespace: str, *, stopping: threading.Event, poll_seconds: float = 2.0) -> None:
        self.api = api  # kubernetes.client.CustomObjectsApi
        self.namespace = namespace
        self.stopping = stopping
        self.poll_seconds = poll_seconds

    def run(self, job: dict[str, Any], watch: Watch, metric: str) -> JobResult:
        from kubernetes.client.exceptions import ApiException

        name = job["metadata"]["name"]
        ns = job["metadata"].get("namespace") or self.namespace
        job = {**job, "metadata": {**job["metadata"], "namespace": ns}}
        try:
            self.api.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, job)
        except ApiException as exc:
            if exc.status != 409:  # 409: this trial's job from an interrupted run: watch it on
                return JobResult("failed", message=f"creating {ns}/{name}: {_reason(exc)}")
        while True:
            if self.stopping.is_set():
                return JobResult("interrupted")
            try:
                obj = self.api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            except ApiException as exc:
                if exc.status == 404:
                    return JobResult("failed", message=f"{ns}/{name} was deleted by someone else")
                time.sleep(self.poll_seconds)  # the API server is busy or restarting: ask again
                continue
            status = obj.get("status") or {}
            report = parse_report(status.get("progress") or {})
            history = objective_points(report, metric)  # the newest evaluation: progress keeps one
            phase = status.get("phase")
            if phase == "Succeeded":
                self._delete(ns, name)
                return finished(report, metric)
            if phase == "Failed":
                self._delete(ns, name)
                return JobResult("failed", eval_history=history, message=_failure(status))
            if history and watch(history, report.total_steps if report else None):
                self._delete(ns, name)
                return JobResult("stopped", eval_history=history)
            time.sleep(self.poll_seconds)

    def _delete(self, ns: str, name: str) -> None:
        """Delete and wait until it is gone, so no more than `parallelism` jobs ever exist."""
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        deadline = time.monotonic() + DELETE_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            try:
                self.api.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            except ApiException as exc:
                if exc.status == 404:
                    return
            time.sleep(min(self.poll_seconds, 1.0))
        raise TimeoutError(f"{ns}/{name} still exists {DELETE_TIMEOUT_SECONDS}s after its deletion: "
                           "is the operator running (it removes the disttrain.dev/finalizer)?")


def _failure(status: dict[str, Any]) -> str:
    failed = next((c for c in status.get("conditions") or [] if c.get("type") == "Failed"), {})
    return f"job Failed: {failed.get('reason', '?')}: {failed.get('message', '')}".strip()[:300]


def _reason(exc: Any) -> str:
    return f"{exc.status} {exc.reason}"
