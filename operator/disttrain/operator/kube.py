"""The operator's few Kubernetes calls, asynchronous, over aiohttp (kopf's own HTTP stack)
with the credentials kopf logged in with; the trainer's /status read the same way.

Why not the official client here: its calls block (kopf's thread pool then bounds how
many jobs move at once) and its generated models cost memory per object. The CLI keeps
the official client. See docs/dependencies.md.

Writes are paced by one token bucket for the whole operator (pacing.py; QPS and burst
are settings), so 500 jobs starting at once queue here instead of drawing 429s; a 429 that
comes anyway is waited out for its Retry-After and sent again. Status patches and deletes
are served before queued creates.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import json
import logging
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import kopf

from disttrain.api.api_timing import retry_after_seconds
from disttrain.api.types import GROUP, PLURAL, VERSION
from disttrain.integrations.registry import REGISTRY
from disttrain.operator.core.backoff import exponential
from disttrain.operator.pacing import BULK, ROUTINE, URGENT, TokenBucket
from disttrain.operator.permissions import check as check_use

log = logging.getLogger("disttrain.kube")

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
# The largest /status answer read from a trainer (its report is a few hundred bytes; the
# evaluation history at most a few tens of KiB).
STATUS_BODY_LIMIT = 256 * 1024
EVENT_SOURCE = "disttrain-operator"


class ApiError(Exception):
    """An answer the caller has to decide about (4xx other than 404/409 handled inline)."""

    def __init__(self, status: int, reason: str, message: str, doing: str):
        super().__init__(f"{doing}: {status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message

    @classmethod
    def of(cls, status: int, answer: dict[str, Any], doing: str) -> ApiError:
        """From a Status the API server answered (a response body, or a watch's ERROR)."""
        return cls(status, str(answer.get("reason") or ""), str(answer.get("message") or ""), doing)

    @property
    def transient(self) -> bool:
        return self.status in RETRY_STATUSES or self.status == 0


class Expired(Exception):
    """A watch's resourceVersion is too old (410 Gone): list again."""


@dataclass(frozen=True, slots=True)
class Created:
    """The outcome of create(): created, already there (ours or not), or refused."""

    created: bool
    existing: dict[str, Any] | None = None  # the object holding the name, on 409


class Kube:
    """create / delete / patch-status / get for the handful of objects the operator owns."""

    def __init__(self, info: kopf.ConnectionInfo, *, qps: float, burst: int, timeout: float = 30.0,
                 on_answer: Callable[[str, int], None] = lambda verb, code: None):
        self.info = info
        self.on_answer = on_answer
        self.server = info.server.rstrip("/")
        self.writes = TokenBucket(qps, burst)
        self._prepaid: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("prepaid", default=None)
        self.timeout = aiohttp.ClientTimeout(total=timeout)
        self._session: aiohttp.ClientSession | None = None
        self._watches: aiohttp.ClientSession | None = None  # long-lived: not in the 32 connections of calls
        self._ssl = _ssl_context(info)

    async def close(self) -> None:
        for session in (self._session, self._watches):
            if session is not None:
                await session.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        info = self.info
        if info.token:
            headers["Authorization"] = f"{info.scheme or 'Bearer'} {info.token}"
        elif info.username and info.password:
            headers["Authorization"] = aiohttp.BasicAuth(info.username, info.password).encode()
        return headers

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=self.timeout, connector=aiohttp.TCPConnector(ssl=self._ssl, limit=32))
        return self._session

    @contextlib.asynccontextmanager
    async def creating(self, count: int) -> AsyncIterator[None]:
        """One job's creates, paced as one batch: the tokens for all of them are taken at
        once, in the jobs' order of arrival, so a job's pods go out together instead of
        interleaved with every other job's (at 500 jobs, each job's 8 creates spread over
        the whole burst). Tokens not spent are given back."""
        prepaid = [await self.writes.acquire(BULK, count)]
        reset = self._prepaid.set(prepaid)
        try:
            yield
        finally:
            self._prepaid.reset(reset)
            if prepaid[0] > 0:
                self.writes.give_back(prepaid[0])

    async def request(self, method: str, path: str, body: Any = None, *, doing: str,
                      content_type: str = "application/json", params: dict[str, str] | None = None,
                      ok_missing: bool = False, priority: int | None = None) -> tuple[int, dict[str, Any]]:
        """One call; 429/5xx/connection errors are retried a few times here (honouring
        Retry-After), then raised as a transient ApiError for the reconcile's back-off.
        A call that permissions.USES does not list is refused before it is sent."""
        check_use(method, path, params)
        prepaid = self._prepaid.get()
        if method == "POST" and prepaid and prepaid[0] > 0:
            prepaid[0] -= 1  # paid for by creating()
        elif method != "GET":
            # Creates are the bulk (8 pods a job); a status patch or a delete goes first,
            # so a job reports Running without waiting behind other jobs' pods.
            await self.writes.acquire(priority if priority is not None else BULK if method == "POST" else URGENT)
        headers = {**self._headers(), "Content-Type": content_type}
        data = json.dumps(body) if body is not None else None
        for attempt in range(4):
            try:
                async with self._client().request(method, self.server + path, data=data, headers=headers,
                                                   params=params) as resp:
                    status = resp.status
                    payload = await _json(resp)
                    retry_after = resp.headers.get("Retry-After")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                status, payload, retry_after = 0, {"message": f"{type(exc).__name__}: {exc}"}, None
            self.on_answer(method, status)
            if status < 400 or (status == 404 and ok_missing):
                return status, payload
            if status in RETRY_STATUSES or status == 0:
                if attempt < 3:
                    await asyncio.sleep(retry_after_seconds(retry_after, exponential(0.5, 2.0, attempt + 1)))
                    continue
            if status == 401 and attempt == 0 and self._relogin():
                headers = {**self._headers(), "Content-Type": content_type}
                continue
            raise ApiError.of(status, payload, doing)
        raise AssertionError("unreachable")

    async def list_pods(self, namespace: str | None, params: dict[str, str]) -> dict[str, Any]:
        """One page of a pod list, in a namespace or (None) in all of them."""
        try:
            return (await self.request("GET", _pods_path(namespace), params=params,
                                       doing=f"listing pods in {namespace or 'all namespaces'}"))[1]
        except ApiError as exc:
            if exc.status == 410:  # the continue token of a long list expired
                raise Expired(str(exc)) from None
            raise

    async def watch_pods(self, namespace: str | None, params: dict[str, str]) -> AsyncIterator[tuple[str, dict]]:
        """(type, object) of each event of one watch request, until the server ends it;
        Expired when its resourceVersion is too old, ApiError when it is refused."""
        path, params = _pods_path(namespace), {**params, "watch": "true"}
        check_use("GET", path, params)
        if self._watches is None or self._watches.closed:
            self._watches = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl, limit=0))
        read = float(params.get("timeoutSeconds", 300)) + 30  # the server ends it first
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout.total, sock_read=read)
        for attempt in range(2):
            async with self._watches.get(self.server + path, params=params, headers=self._headers(),
                                         timeout=timeout) as resp:
                self.on_answer("WATCH", resp.status)
                if resp.status == 401 and attempt == 0 and self._relogin():
                    continue
                if resp.status == 410:
                    raise Expired("410 Gone")
                if resp.status >= 400:
                    raise ApiError.of(resp.status, await _json(resp),
                                      f"watching pods in {namespace or 'all namespaces'}")
                async for event in _lines(resp):
                    kind, obj = event.get("type"), event.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise Expired(str(obj.get("message") or "410 Gone"))
                        raise ApiError.of(int(obj.get("code") or 0), obj, "watching pods")
                    yield str(kind), obj
                return

    def _relogin(self) -> bool:
        """A projected service-account token rotates: read it again once on a 401."""
        try:
            self.info = login()
        except (kopf.LoginError, OSError, ValueError, KeyError) as exc:
            log.warning("re-login after 401 failed: %s", exc)
            return False
        return True

    # ---- the calls ---------------------------------------------------------------------

    async def create(self, obj: dict[str, Any]) -> Created:
        """POST; on 409 the holder of the name is fetched so the caller can check its owner."""
        ns, name, kind = obj["metadata"]["namespace"], obj["metadata"]["name"], kind_of(obj)
        try:
            await self.request("POST", _child_path(ns, kind), obj, doing=f"creating {kind} {ns}/{name}")
        except ApiError as exc:
            if exc.status != 409:
                raise
            return Created(created=False, existing=await self.get(ns, kind, name))
        return Created(created=True)

    async def get(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        status, payload = await self.request("GET", f"{_child_path(namespace, kind)}/{name}",
                                             doing=f"reading {kind} {namespace}/{name}", ok_missing=True)
        return payload if status != 404 else None

    async def served(self, group: str, version: str, plural: str) -> bool:
        """Whether the API server's discovery lists the resource now (what kopf reads)."""
        status, payload = await self.request("GET", f"/apis/{group}/{version}", doing=f"discovering {group}/{version}",
                                             ok_missing=True)
        return status != 404 and any(r.get("name") == plural for r in payload.get("resources") or ())

    async def job_uid(self, namespace: str, name: str) -> str | None:
        """The uid of the job of that name now (None: there is none)."""
        status, payload = await self.request("GET", f"{_job_path(namespace)}/{name}",
                                             doing=f"reading {namespace}/{name}", ok_missing=True)
        return None if status == 404 else (payload.get("metadata") or {}).get("uid")

    async def delete_pod(self, namespace: str, name: str, uid: str | None, *, force: bool = False) -> None:
        """Delete exactly the pod we saw (a uid precondition): never a successor or a squatter.
        force: at once (grace period 0), for a pod whose kubelet is gone."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if force:
            body["gracePeriodSeconds"] = 0
        try:
            await self.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body,
                               doing=f"deleting pod {namespace}/{name}", ok_missing=True)
        except ApiError as exc:
            if exc.status != 409:  # 409: the uid precondition failed, it is already another pod
                raise

    async def patch_status(self, namespace: str, name: str, patch: dict[str, Any],
                           routine: bool = False) -> dict[str, Any]:
        """`routine`: nothing a user waits for (the worker counters alone): after every
        phase and condition change that is waiting, before pod creates."""
        status, payload = await self.request(
            "PATCH", f"{_job_path(namespace)}/{name}/status", {"status": patch},
            content_type="application/merge-patch+json", doing=f"writing the status of {namespace}/{name}",
            ok_missing=True, priority=ROUTINE if routine else URGENT)
        return payload if status != 404 else {}

    async def delete_job(self, namespace: str, name: str) -> None:
        await self.request("DELETE", f"{_job_path(namespace)}/{name}",
                           {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
                           doing=f"deleting {namespace}/{name}", ok_missing=True)

    async def replace(self, obj: dict[str, Any], subresource: str = "") -> dict[str, Any] | None:
        """PUT with the object's resourceVersion (optimistic concurrency), of the object or
        of a subresource ("status"): the object as stored, or None when someone else changed
        it first (409; read it and decide again)."""
        ns, name, kind = obj["metadata"]["namespace"], obj["metadata"]["name"], kind_of(obj)
        path = f"{_child_path(ns, kind)}/{name}" + (f"/{subresource}" if subresource else "")
        try:
            _status, payload = await self.request("PUT", path, obj, doing=f"replacing {kind} {ns}/{name}"
                                                  + (f" ({subresource})" if subresource else ""))
        except ApiError as exc:
            if exc.status == 409:
                return None
            raise
        return payload

    async def patch(self, namespace: str, kind: str, name: str, patch: dict[str, Any]) -> None:
        """A merge patch of an object (a missing one is no error: it went meanwhile)."""
        await self.request("PATCH", f"{_child_path(namespace, kind)}/{name}", patch,
                           content_type="application/merge-patch+json", doing=f"patching {kind} {namespace}/{name}",
                           ok_missing=True)

    async def delete(self, namespace: str, kind: str, name: str, uid: str | None = None) -> None:
        """Delete exactly that object (a uid precondition when given); gone already is fine."""
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self.request("DELETE", f"{_child_path(namespace, kind)}/{name}", body,
                               doing=f"deleting {kind} {namespace}/{name}", ok_missing=True)
        except ApiError as exc:
            if exc.status != 409:
                raise

    async def post_event(self, involved: dict[str, Any], type_: str, reason: str, message: str,
                         when: str) -> None:
        """A core/v1 Event about `involved` (apiVersion, kind, namespace, name, uid)."""
        ns = involved["namespace"]
        event = {"apiVersion": "v1", "kind": "Event",
                 "metadata": {"generateName": f"{involved['name']}.", "namespace": ns},
                 "involvedObject": involved, "type": type_, "reason": reason, "message": message,
                 "source": {"component": EVENT_SOURCE}, "reportingComponent": EVENT_SOURCE,
                 "firstTimestamp": when, "lastTimestamp": when, "count": 1}
        await self.request("POST", f"/api/v1/namespaces/{ns}/events", event,
                           doing=f"posting event {reason} on {ns}/{involved['name']}")

    async def trainer_status(self, ip: str, port: int, timeout: float = 2.0) -> dict[str, Any] | None:
        """GET http://<pod ip>:<port>/status; None when the trainer does not answer (yet).

        A pod is a tenant's: its answer is not trusted. Redirects are not followed (they
        could point the operator at any address it can reach), the body is read up to
        STATUS_BODY_LIMIT bytes and the whole call is bounded in time; report.parse_report
        bounds and types every value."""
        host = f"[{ip}]" if ":" in ip else ip
        try:
            async with self._client().get(f"http://{host}:{port}/status", allow_redirects=False,
                                          timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
                if resp.status != 200:
                    return None
                body = await resp.content.read(STATUS_BODY_LIMIT + 1)
                if len(body) > STATUS_BODY_LIMIT:
                    return None
                data = json.loads(body)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    async def trainer_checkpoint(self, ip: str, port: int, token: str, hold: int,
                                 wait: float) -> tuple[dict[str, Any] | None, str | None, bool]:
        """POST http://<pod ip>:<port>/checkpoint?holdSeconds=..&waitSeconds=.. with the pod's
        token (checkpoint-then-evict, docs/pod-contract.md). Returns (the trainer's report,
        None, True) when it took the request (200: held at a checkpoint; 202: not yet), else
        (None, why, whether anything answered over HTTP). Untrusted like /status: no
        redirects, a bounded body and time."""
        host = f"[{ip}]" if ":" in ip else ip
        url = f"http://{host}:{port}/checkpoint?holdSeconds={int(hold)}&waitSeconds={max(0, int(wait))}"
        try:
            async with self._client().post(url, allow_redirects=False, headers={"Authorization": f"Bearer {token}"},
                                           timeout=aiohttp.ClientTimeout(total=wait + 10)) as resp:
                if resp.status not in (200, 202):
                    return None, f"HTTP {resp.status} from POST /checkpoint", True
                body = await resp.content.read(STATUS_BODY_LIMIT + 1)
                data = json.loads(body) if len(body) <= STATUS_BODY_LIMIT else None
        except asyncio.TimeoutError:
            return None, "POST /checkpoint was not answered in time", False
        except (aiohttp.ClientError, OSError) as exc:
            return None, f"POST /checkpoint failed: {type(exc).__name__}", False
        except ValueError:
            data = None
        return (data, None, True) if isinstance(data, dict) else (None, "POST /checkpoint answered no report", True)


# Where each kind of child lives in the API. A kind that two API groups define (an
# integration's) is named kubectl's way, KIND.GROUP (kind_of).
_PATHS = {"Pod": "/api/v1/namespaces/{ns}/pods", "Service": "/api/v1/namespaces/{ns}/services",
          "NetworkPolicy": "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
          "Lease": "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
          "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
          # Each integration's kinds, as it declares them (integrations/protocol.py); a
          # cluster-scoped kind's namespace is "".
          **{kind: path for integration in REGISTRY for kind, path in integration.paths.items()}}


def kind_of(obj: dict[str, Any]) -> str:
    """How _PATHS (and get) name the kind of `obj`: its kind, or KIND.GROUP where needed."""
    kind = obj["kind"]
    return kind if kind in _PATHS else f"{kind}.{obj['apiVersion'].split('/')[0]}"


def _child_path(namespace: str, kind: str) -> str:
    return _PATHS[kind].format(ns=namespace)


def _job_path(namespace: str) -> str:
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"


def _pods_path(namespace: str | None) -> str:
    return _child_path(namespace, "Pod") if namespace else "/api/v1/pods"


async def _lines(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """A watch's body, one JSON event a line. Read in chunks, not readline(): aiohttp
    refuses a line above its buffer's limit, and a pod can be bigger. A line's pieces are
    joined once, when its newline comes."""
    parts: list[bytes] = []
    async for chunk in resp.content.iter_any():
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            parts.append(chunk[start:end])
            line, parts = b"".join(parts), []
            if line.strip():
                yield json.loads(line)
            start = end + 1
        if start < len(chunk):
            parts.append(chunk[start:])
    line = b"".join(parts)
    if line.strip():
        yield json.loads(line)


async def _json(resp: aiohttp.ClientResponse) -> dict[str, Any]:
    try:
        data = await resp.json(content_type=None)
    except (ValueError, aiohttp.ContentTypeError):
        return {"message": (await resp.text())[:500]}
    return data if isinstance(data, dict) else {}


def login() -> kopf.ConnectionInfo:
    """In-cluster service-account credentials when running as a pod, else the kubeconfig."""
    settings = kopf.OperatorSettings()
    try:
        info = kopf.login_with_service_account(settings=settings) or kopf.login_with_kubeconfig(settings=settings)
    except OSError as exc:
        raise kopf.LoginError(f"no credentials: the kube-config cannot be read ({exc}); set KUBECONFIG to a "
                              "readable file, or run in a pod with a service-account token") from None
    if info is None:
        raise kopf.LoginError("no credentials: neither a service-account token nor KUBECONFIG/~/.kube/config")
    return info


def _ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    if not info.server.startswith("https"):
        return False
    if info.insecure:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    elif info.ca_data:
        ctx = ssl.create_default_context(cadata=_pem(info.ca_data).decode())
    else:
        ctx = ssl.create_default_context(cafile=info.ca_path)  # type: ignore[arg-type]
    if info.certificate_path or info.certificate_data:
        # ssl loads client certificates from files only: data goes through a private temp file.
        with contextlib.ExitStack() as stack:
            cert = info.certificate_path or stack.enter_context(_temp_pem(info.certificate_data))
            key = info.private_key_path or (stack.enter_context(_temp_pem(info.private_key_data))
                                            if info.private_key_data else None)
            ctx.load_cert_chain(certfile=cert, keyfile=key)  # type: ignore[arg-type]
    return ctx


def _pem(data: str | bytes) -> bytes:
    """kubeconfig *-data fields are base64 of PEM; accept PEM as it is too."""
    raw = data.encode() if isinstance(data, str) else data
    return raw if raw.lstrip().startswith(b"-----") else base64.b64decode(raw)


@contextlib.contextmanager
def _temp_pem(data: str | bytes | None) -> Iterator[str]:
    with tempfile.NamedTemporaryFile("wb", prefix="disttrain-", suffix=".pem") as out:
        out.write(_pem(data or b""))
        out.flush()
        yield out.name
