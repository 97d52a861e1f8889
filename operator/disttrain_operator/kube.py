"""Kubernetes writes for the handlers, and the mapping of API errors to kopf's retry model.

Create-if-absent treats 409 AlreadyExists as done: names are deterministic, so an
operator restarted half-way creates nothing twice.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .api.types import GROUP, PLURAL, VERSION

RETRYABLE = {409, 429, 500, 502, 503, 504}


class Kube:
    """The few calls the operator makes, over the official client."""

    def __init__(self, api: client.ApiClient):
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.networking = client.NetworkingV1Api(api)

    def create_if_absent(self, obj: dict[str, Any]) -> bool:
        """True when created, False when it already existed."""
        ns = obj["metadata"]["namespace"]
        create = {"Pod": self.core.create_namespaced_pod,
                  "Service": self.core.create_namespaced_service,
                  "NetworkPolicy": self.networking.create_namespaced_network_policy}[obj["kind"]]
        try:
            create(ns, obj)
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise as_kopf_error(exc, f"creating {obj['kind']} {ns}/{obj['metadata']['name']}") from None

    def delete_pod(self, namespace: str, name: str) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise as_kopf_error(exc, f"deleting pod {namespace}/{name}") from None

    def delete_job(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, propagation_policy="Background")
        except ApiException as exc:
            if exc.status != 404:
                raise as_kopf_error(exc, f"deleting {namespace}/{name}") from None


def as_kopf_error(exc: ApiException, doing: str) -> Exception:
    """Transient API trouble -> TemporaryError (retry with delay); other 4xx -> permanent."""
    reason = _message(exc)
    if exc.status in RETRYABLE or exc.status is None or exc.status == 0:
        return kopf.TemporaryError(f"{doing}: {exc.status} {reason}", delay=5)
    if 400 <= (exc.status or 0) < 500:
        return kopf.PermanentError(f"{doing}: {exc.status} {reason}")
    return exc


def _message(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "{}").get("message") or exc.reason or ""
    except (ValueError, AttributeError):
        return exc.reason or ""


def fetch_trainer_status(ip: str, port: int, timeout: float = 2.0) -> dict[str, Any] | None:
    """GET http://<pod ip>:<port>/status; None when the trainer does not answer (yet)."""
    host = f"[{ip}]" if ":" in ip else ip
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/status", timeout=timeout) as response:
            data = json.loads(response.read(1 << 20))
    except (OSError, ValueError, urllib.error.URLError):
        return None
    return data if isinstance(data, dict) else None
