"""/metrics served the way controller-runtime serves it by default: over HTTPS, with a
certificate the operator makes when it starts, to callers the API server vouches for
(a TokenReview of their bearer token) and allows to GET the non-resource URL /metrics (a
SubjectAccessReview). The series name every tenant's jobs, so reaching the port is not
enough: the chart's NetworkPolicy is a second wall, not the only one.

Verdicts are kept for a minute per token (only a digest of it), so Prometheus scraping
every few seconds costs two reviews a minute. An API server that cannot answer gives 503
(never cached): a scrape failing loudly beats series served to whoever asks.
DISTTRAIN_METRICS_AUTH=none serves plain HTTP to anyone, with a warning in the log.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import ipaddress
import logging
import os
import socket
import ssl
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from disttrain.operator.kube import ApiError, Kube
from disttrain.operator.pacing import URGENT

AUTH_MODES = ("kubernetes", "none")
PATH = "/metrics"
VERDICT_SECONDS = 60.0
VERDICTS_KEPT = 1024  # distinct tokens remembered; the oldest goes first
TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True)
class Verdict:
    status: int  # 200 serve; 401 who are you; 403 not allowed; 503 could not ask
    why: str


def bearer(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header, else None."""
    scheme, _, token = (header or "").partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def access_review(user: dict[str, Any]) -> dict[str, Any]:
    """The SubjectAccessReview asking whether the TokenReview's user may GET /metrics."""
    spec: dict[str, Any] = {"user": user.get("username", ""), "nonResourceAttributes": {"path": PATH, "verb": "get"}}
    for key in ("groups", "uid", "extra"):
        if user.get(key):
            spec[key] = user[key]
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def judged(token_status: dict[str, Any], access_status: dict[str, Any] | None) -> Verdict:
    """The verdict from the two reviews' status (access_status None: not asked yet)."""
    if not token_status.get("authenticated"):
        return Verdict(401, f"the token was not accepted: {token_status.get('error') or 'unauthenticated'}")
    user = token_status.get("user", {}).get("username", "")
    if access_status is None or not access_status.get("allowed") or access_status.get("denied"):
        reason = (access_status or {}).get("reason") or ""
        return Verdict(403, f"{user} may not get {PATH}: bind it the install's metrics-reader ClusterRole (the "
                            f"chart's metrics.readers; docs/operations.md, Metrics){': ' + reason if reason else ''}")
    return Verdict(200, f"{user} may get {PATH}")


class Reviewer:
    """Asks the API server about a caller's token; remembers each verdict VERDICT_SECONDS."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic,
                 seconds: float = VERDICT_SECONDS, kept: int = VERDICTS_KEPT):
        self.kube, self.clock, self.seconds, self.kept = kube, clock, seconds, kept
        self._verdicts: OrderedDict[str, tuple[float, Verdict]] = OrderedDict()

    async def verdict(self, token: str) -> Verdict:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        kept = self._verdicts.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        try:
            found = await self._ask(token)
        except ApiError as exc:
            return Verdict(503, f"the API server could not review the token: {exc}")
        self._verdicts[key] = (now + self.seconds, found)
        self._verdicts.move_to_end(key)
        while len(self._verdicts) > self.kept:
            self._verdicts.popitem(last=False)
        return found

    async def _ask(self, token: str) -> Verdict:
        _, review = await self.kube.request(
            "POST", TOKEN_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                                    "spec": {"token": token}},
            doing="reviewing the token of a /metrics caller", priority=URGENT)
        status = review.get("status", {})
        if not status.get("authenticated"):
            return judged(status, None)
        _, access = await self.kube.request(
            "POST", ACCESS_REVIEWS, access_review(status.get("user", {})),
            doing="asking whether a /metrics caller may read it", priority=URGENT)
        return judged(status, access.get("status", {}))


def self_signed(days: int = 365) -> tuple[bytes, bytes]:
    """(certificate, key) in PEM: a fresh key each start, for this host's name. Scrapers
    skip verifying it (the chart's ServiceMonitor, as kubebuilder's default): it keeps the
    token and the series off the wire; the token review is what keeps strangers out."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    host = socket.gethostname()
    names: list[x509.GeneralName] = [x509.DNSName(host), x509.DNSName("localhost"),
                                     x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"disttrain-operator@{host}")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def server_context(cert: bytes, key: bytes) -> ssl.SSLContext:
    """TLS 1.2 or newer with the given PEM pair. ssl loads a pair only from paths, and the
    operator's pod has no writable directory (read-only root, no /tmp): the pair goes
    through anonymous in-memory files (memfd), named by /proc/self/fd, never to a disk."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    fds = [os.memfd_create("disttrain-metrics-tls"), os.memfd_create("disttrain-metrics-tls")]
    try:
        for fd, pem in zip(fds, (cert, key)):
            os.write(fd, pem)
        context.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
    finally:
        for fd in fds:
            os.close(fd)
    return context


class MetricsServer:
    """/metrics of one registry, in the operator's event loop (aiohttp, which it already
    speaks to the API server with). reviewer None: plain HTTP, no questions asked."""

    def __init__(self, registry: CollectorRegistry, reviewer: Reviewer | None):
        self.registry, self.reviewer = registry, reviewer
        self._runner: web.AppRunner | None = None

    async def start(self, port: int, address: str = "0.0.0.0") -> None:
        app = web.Application()
        app.router.add_get(PATH, self.metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        context = server_context(*self_signed()) if self.reviewer is not None else None
        await web.TCPSite(self._runner, address, port, ssl_context=context).start()

    async def metrics(self, request: web.Request) -> web.Response:
        if self.reviewer is not None:
            token = bearer(request.headers.get("Authorization"))
            if token is None:
                return web.Response(status=401, text=f"{PATH} needs a bearer token (Authorization: Bearer ...)\n",
                                    headers={"WWW-Authenticate": 'Bearer realm="disttrain-operator"'})
            verdict = await self.reviewer.verdict(token)
            if verdict.status != 200:
                if verdict.status == 503:
                    logging.getLogger(__name__).warning(f"{PATH}: {verdict.why}")
                return web.Response(status=verdict.status, text=verdict.why + "\n")
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        # Rendering every series takes milliseconds at 500 jobs: off the loop, which
        # reconciles jobs meanwhile (the registry is safe to read from another thread).
        body = await asyncio.get_running_loop().run_in_executor(None, encoder, self.registry)
        response = web.Response(body=body, headers={"Content-Type": content_type})
        response.enable_compression()
        return response

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
