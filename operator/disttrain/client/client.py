"""A small Python client for DistributedTraining jobs: `from disttrain import Client`.

    client = Client(namespace="team-a")           # kubeconfig as kubectl reads it
    client.create({"metadata": {"name": "demo"}, "spec": {"nodes": 1}})
    client.wait("demo", "Succeeded", timeout=600)  # also watch, logs, suspend, delete: docs/cli.md

It needs only the official `kubernetes` client and the pure API model: no torch, no kopf,
so it imports in a notebook. Every failure is a `DisttrainError` whose str() is the
one-line message kubectl would print (errors.py); the CLI (cli/) is this client plus formatting.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from disttrain.api import types as t
from disttrain.api.names import CONTAINER_NAME, JOB_LABEL
from disttrain.api.api_timing import WATCH_SECONDS
from disttrain.api.validate import validate_document
from disttrain.client.applying import APPLY, FIELD_MANAGER, own_fields_only, same_content
from disttrain.client.errors import (OBJECT, REFUSED, RESOURCE, ApplyConflict, DisttrainError, Expired,
                                     InvalidArgument, InvalidJob, JobFailed, NotFound, Unreachable, WaitTimeout,
                                     api_error, connection_failure, failure_reason, retry_after)
from disttrain.client.function_job import NotShippable, function_trainer, job_name_for
from disttrain.client.jobview import WAITABLE, JobView, unseen, view_of
from disttrain.client.waiting import MET, NEVER, WaitFor, parse_wait_for, wait_for_decision
from disttrain.client.kubeconfig import connect, named
from disttrain.client.logs import LogLine, log_time_order, merged, on_kwok, simulated, since_seconds, worker_of
from disttrain.client.manifest import manifest_of

# How long past its own timeoutSeconds a watch's server may stay silent before the client
# gives up on it (a read timeout: Unreachable): the server ends a healthy watch first.
WATCH_SLACK = 30
BUSY_RETRIES = 10  # a request answered 429 is asked again this many times (client-go's number)
CONNECT_TIMEOUT = 10
REQUEST_TIMEOUT = (CONNECT_TIMEOUT, 60)  # (connect, read) seconds of a request that is no watch or followed log


class Client:
    """DistributedTraining jobs in one cluster (a kubeconfig context) and namespace.

    namespace: default for every call; else the context's namespace, else "default".
    context: a kubeconfig context name (like kubectl --context); else the current one.
    kubeconfig: a path, or several joined with ':' (like $KUBECONFIG); else $KUBECONFIG,
    else ~/.kube/config; in a pod without either, the pod's service account.
    request_timeout: seconds one request may take, connecting included (like kubectl
    --request-timeout); 0 waits forever; default 10 s to connect and 60 s to answer.
    Watches and followed logs are not bounded by it.
    """

    def __init__(self, namespace: str | None = None, *, context: str | None = None,
                 kubeconfig: str | None = None, request_timeout: float | None = None):
        from kubernetes import client as k8s

        if request_timeout is not None and request_timeout < 0:
            raise InvalidArgument(f"request_timeout {request_timeout}: give seconds >= 0 (0: no limit)")
        self._timeout: Any = (REQUEST_TIMEOUT if request_timeout is None
                              else None if request_timeout == 0 else request_timeout)
        self._api, context_namespace = connect(kubeconfig, context)
        self._kubeconfig = kubeconfig
        self.namespace = namespace or context_namespace or "default"
        self._custom = k8s.CustomObjectsApi(self._api)
        self._core = k8s.CoreV1Api(self._api)

    # ---- jobs -------------------------------------------------------------------

    def create(self, job: dict[str, Any] | t.DistributedTrainingSpec, *, name: str | None = None,
               namespace: str | None = None, dry_run: bool = False) -> dict[str, Any]:
        """Validate offline with the operator's rules, then create. `job` is a whole
        object (dict) or a typed spec (api.types.DistributedTrainingSpec) with `name`.
        Raises InvalidJob naming every bad field before anything reaches the cluster, and
        AlreadyExists' API error for a name in use (apply() updates one). dry_run: the API
        server checks and answers as if it created the job, and stores nothing."""
        obj, ns = self._checked(job, name, namespace)
        return self._call(lambda: self._custom.create_namespaced_custom_object(
            t.GROUP, t.VERSION, ns, t.PLURAL, obj, field_manager=FIELD_MANAGER, dry_run="All" if dry_run else None,
            _request_timeout=self._timeout))

    def apply(self, job: dict[str, Any] | t.DistributedTrainingSpec, *, name: str | None = None,
              namespace: str | None = None, dry_run: bool = False, force: bool = False) -> tuple[dict[str, Any], str]:
        """Create the job or update the fields this file sets, like `kubectl apply
        --server-side`: (the object, "created" | "configured" | "unchanged"). Validated
        offline first, as create() is. Fields another manager set (kubectl apply, a
        controller) raise ApplyConflict unless force takes them over. What the operator
        lets change on a running job is in docs/api.md (most fields only while suspended:
        the API server refuses the rest, and nothing is changed)."""
        obj, ns = self._checked(job, name, namespace)  # (it refuses a job without metadata.name)
        job_name = obj["metadata"]["name"]
        try:
            before: dict[str, Any] | None = self.get(job_name, ns)
        except NotFound:
            before = None

        def patch(force: bool) -> dict[str, Any]:
            # The body is read here: the generated client decodes only a 200's, and an
            # apply that creates the object answers 201.
            response = self._call(lambda: self._custom.patch_namespaced_custom_object(
                t.GROUP, t.VERSION, ns, t.PLURAL, job_name, obj, field_manager=FIELD_MANAGER, force=force or None,
                dry_run="All" if dry_run else None, _content_type=APPLY, _request_timeout=self._timeout,
                _preload_content=False))
            return json.loads(response.data)

        try:
            after = patch(force)
        except DisttrainError as exc:
            if "(Conflict)" not in str(exc):
                raise
            if not own_fields_only(exc.causes):
                raise ApplyConflict(f"{exc}; --force-conflicts (force=True) takes these fields over") from None
            # Only fields this client's create() set (an update, to the API server, not an
            # apply): the user is applying over their own submit, so take them.
            after = patch(True)
        return after, ("created" if before is None else "unchanged" if same_content(before, after) else "configured")

    def train(self, func: Callable[..., Any], kwargs: dict[str, Any] | None = None, *, name: str | None = None,
              namespace: str | None = None, spec: dict[str, Any] | None = None, dry_run: bool = False) -> str:
        """Run `func(**kwargs)` on every worker of a new job, as Kubeflow's
        `TrainerClient.train(func)` does; returns the job's name (default: the function's,
        with a random suffix). `spec` is the rest of the job (nodes, gpusPerNode, image,
        env, ...); its trainer is the function. The function runs in the job's image
        (the trainer image by default, with torch): it imports what it uses inside itself,
        reads torchrun's RANK/WORLD_SIZE and sets up torch.distributed itself; its
        arguments are JSON. A function that cannot run there (a lambda, a closure, a name
        from the module around it, arguments that are not JSON) raises InvalidArgument
        before anything is sent (function_job.py)."""
        if spec is not None and "trainer" in spec:
            raise InvalidArgument("spec.trainer: train() sets the trainer to the function; drop it from spec")
        try:
            trainer = function_trainer(func, kwargs)
        except NotShippable as exc:
            raise InvalidArgument(f"train(): {exc}") from None
        job_name = name or job_name_for(func)
        self.create({"metadata": {"name": job_name}, "spec": {**(spec or {}), "trainer": trainer}},
                    namespace=namespace, dry_run=dry_run)
        return job_name

    def _checked(self, job: dict[str, Any] | t.DistributedTrainingSpec, name: str | None,
                 namespace: str | None) -> tuple[dict[str, Any], str]:
        """The whole object with its namespace, validated offline (InvalidJob if not)."""
        obj = manifest_of(job, name=name)
        ns = namespace or (obj.get("metadata") or {}).get("namespace") or self.namespace
        obj["metadata"]["namespace"] = ns
        result = validate_document(obj)
        if not result.ok:
            errors = [str(e) for e in result.errors]
            label = (obj.get("metadata") or {}).get("name") or "(unnamed)"
            raise InvalidJob(f"error: {label} is invalid: {'; '.join(errors)}", errors)
        return obj, ns

    def get(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The job's object as the API returns it."""
        return self._call(lambda: self._custom.get_namespaced_custom_object(
            t.GROUP, t.VERSION, namespace or self.namespace, t.PLURAL, name, _request_timeout=self._timeout))

    def status(self, name: str, namespace: str | None = None) -> JobView:
        return view_of(self.get(name, namespace))

    def list(self, namespace: str | None = None, *, all_namespaces: bool = False,
             selector: str | None = None) -> list[dict[str, Any]]:
        """The jobs of the namespace (or all); `selector` is a label selector like kubectl
        -l: "disttrain.dev/sweep=lr" (the API server filters)."""
        return self._list(namespace, all_namespaces, selector)["items"]

    def jobs(self, namespace: str | None = None, *, all_namespaces: bool = False,
             selector: str | None = None) -> list[JobView]:
        """list(), typed: a JobView per job (Kubeflow's list_jobs)."""
        return [view_of(o) for o in self.list(namespace, all_namespaces=all_namespaces, selector=selector)]

    def events(self, name: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """core/v1 Events about the job (they expire after about an hour)."""
        ns = namespace or self.namespace
        found = self._call(lambda: self._core.list_namespaced_event(
            ns, field_selector=f"involvedObject.name={name},involvedObject.kind={t.KIND}",
            _request_timeout=self._timeout))
        return [self._api.sanitize_for_serialization(e) for e in found.items]

    def suspend(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        """spec.suspend=true: the operator deletes the pods and keeps the job."""
        return self._patch_suspend(name, namespace, True)

    def resume(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        """spec.suspend=false: pods come back and resume from the newest checkpoint."""
        return self._patch_suspend(name, namespace, False)

    def delete(self, name: str, namespace: str | None = None, *, wait: bool = False,
               timeout: float | None = None) -> None:
        """Delete the job (its pods go with it); with wait, until the object is gone."""
        ns = namespace or self.namespace
        self._call(lambda: self._custom.delete_namespaced_custom_object(
            t.GROUP, t.VERSION, ns, t.PLURAL, name, _request_timeout=self._timeout))
        if wait:
            deadline = None if timeout is None else time.monotonic() + timeout
            for _ in self._watch_one(name, ns, deadline, until_deleted=True):
                pass

    # ---- following --------------------------------------------------------------

    def watch(self, name: str, namespace: str | None = None, *, timeout: float | None = None,
              stop_when_finished: bool = True) -> Iterator[JobView]:
        """A JobView now and on every change of the job, from a watch (no polling); ends
        after the Succeeded or Failed view. Raises NotFound if the job is deleted and
        WaitTimeout after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for obj in self._watch_one(name, namespace or self.namespace, deadline):
            view = view_of(obj)
            yield view
            if stop_when_finished and view.finished:
                return

    def wait(self, name: str, phase: str | Iterable[str] = "Succeeded", namespace: str | None = None, *,
             timeout: float | None = None, on_change: Callable[[JobView], None] | None = None) -> JobView:
        """Block until the job's phase is `phase`, or one of several (Running, Succeeded,
        Suspended); returns the job as it was then. `on_change` is called with every
        version of the job seen on the way (the watch's, not a poll's). Raises JobFailed
        when it can no longer get to any of them (it Failed, or ended), WaitTimeout after
        `timeout` seconds, InvalidArgument for a phase that cannot be waited for."""
        phases = (phase,) if isinstance(phase, str) else tuple(phase)
        wrong = [p for p in phases if p not in WAITABLE]
        if wrong or not phases:
            raise InvalidArgument(f"phase {', '.join(map(repr, wrong)) or '(none)'} cannot be waited for; "
                                  f"allowed: {', '.join(WAITABLE)}")
        view = self.wait_for(name, WaitFor(",".join(phases), phases=phases), namespace, timeout=timeout,
                             on_change=on_change)
        assert view is not None  # only a wait for deletion ends without the job
        return view

    def wait_for(self, name: str, target: str | WaitFor, namespace: str | None = None, *,
                 timeout: float | None = None, on_change: Callable[[JobView], None] | None = None
                 ) -> JobView | None:
        """Block until `target`, written as kubectl's `wait --for` takes it: a phase (or
        several, comma-separated), "condition=TYPE[=STATUS]" (STATUS defaults to True,
        case does not matter), "delete", or "jsonpath={PATH}[=VALUE]" (without VALUE:
        until PATH exists). Returns the JobView once met (None after "delete"). A phase
        the job can no longer reach raises JobFailed; conditions and JSONPath wait until
        met or `timeout` (WaitTimeout), as kubectl's do. InvalidArgument for a bad target."""
        if isinstance(target, WaitFor):
            want = target
        else:
            try:
                want = parse_wait_for(target)
            except ValueError as exc:
                raise InvalidArgument(f"error: {exc}") from None
        ns = namespace or self.namespace
        deadline = None if timeout is None else time.monotonic() + timeout
        for obj in self._watch_one(name, ns, deadline, until_deleted=want.delete):
            view = view_of(obj)
            if on_change is not None:
                on_change(view)
            decision = wait_for_decision(want, obj)
            if decision == MET:
                return view
            if decision == NEVER:
                raise JobFailed(f"error: {OBJECT}/{name} is {view.phase}; it will never be "
                                f"{' or '.join(want.phases)}" + failure_reason(view), view)
        if want.delete:
            return None
        raise AssertionError("unreachable: the watch ends only by a return or an error")

    def watch_all(self, namespace: str | None = None, *, all_namespaces: bool = False, selector: str | None = None,
                  name: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """("ADDED"|"MODIFIED"|"DELETED", object) for every job in the namespace (or all;
        only those `selector` matches, or only the one called `name`): the current ones
        first, then ("SYNCED", {}), then changes as the API server sends them. ("RELIST",
        {}) when the watch expired: forget all, the list follows. Endless."""
        from kubernetes import watch

        field = f"metadata.name={name}" if name else None
        filters = {k: v for k, v in (("label_selector", selector), ("field_selector", field)) if v}
        while True:
            listing = self._list(namespace, all_namespaces, selector, field)
            for obj in listing["items"]:
                yield "ADDED", obj
            yield "SYNCED", {}
            version = listing["metadata"]["resourceVersion"]
            while True:
                stream = watch.Watch().stream(*self._list_call(namespace, all_namespaces),
                                              resource_version=version, timeout_seconds=WATCH_SECONDS,
                                              allow_watch_bookmarks=True, **filters,
                                              _request_timeout=(CONNECT_TIMEOUT, WATCH_SECONDS + WATCH_SLACK))
                try:
                    for event in self._guard(stream):
                        obj = event["object"]
                        version = obj.get("metadata", {}).get("resourceVersion", version)
                        if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            yield event["type"], obj
                except Expired:
                    yield "RELIST", {}
                    break

    def logs(self, name: str, namespace: str | None = None, *, worker: int | None = None,
             follow: bool = False, tail: int | None = None, since: float | None = None,
             previous: bool = False) -> Iterator[LogLine]:
        """The trainer container's log lines of every worker (or one), with the worker
        index and the kubelet's timestamp. Without follow, lines are ordered by those
        timestamps across workers; with follow, as they arrive, until every worker's log
        ends. since: only lines of the last so many seconds; previous: the log of the
        container that ran before the current one restarted (kubectl logs --previous)."""
        ns = namespace or self.namespace
        options = {"tail_lines": tail, "since_seconds": None if since is None else since_seconds(since),
                   "previous": previous or None}
        workers = self._workers(ns, name, worker, follow)
        if not workers:
            which = f"worker {worker}" if worker is not None else "worker pods"
            raise NotFound(f"error: {OBJECT}/{name} has no {which} now (pods appear while it runs; "
                           "cleanPodPolicy may have removed finished ones)")
        if not follow:
            lines = [line for index, pod in workers for line in self._pod_log(ns, pod, index, False, options)]
            yield from sorted(lines, key=lambda line: log_time_order(line.time))
            return
        yield from merged([lambda i=i, p=p: self._pod_log(ns, p, i, True, options) for i, p in workers])

    # ---- internals --------------------------------------------------------------

    def _workers(self, ns: str, name: str, worker: int | None, follow: bool) -> list[tuple[int | None, str]]:
        """(index, pod name) of the job's workers. Following a job that is still starting
        (`submit -d` then `logs -f`), wait until the pods it wants exist."""
        while True:
            job = self.get(name, ns)  # NotFound before anything else
            pods = self._call(lambda: self._core.list_namespaced_pod(
                ns, label_selector=f"{JOB_LABEL}={name}", _request_timeout=self._timeout)).items
            workers = sorted(((worker_of(p), p.metadata.name) for p in pods), key=lambda w: (w[0] is None, w[0] or 0))
            if worker is not None:
                workers = [w for w in workers if w[0] == worker]
            view = view_of(job)
            wanted = 1 if worker is not None else (view.desired or (job.get("spec") or {}).get("nodes") or 1)
            if not follow or len(workers) >= wanted or view.finished or view.phase == "Suspended":
                return workers
            time.sleep(1)

    def _patch_suspend(self, name: str, namespace: str | None, value: bool) -> dict[str, Any]:
        ns = namespace or self.namespace
        return self._call(lambda: self._custom.patch_namespaced_custom_object(
            t.GROUP, t.VERSION, ns, t.PLURAL, name, {"spec": {"suspend": value}},
            _request_timeout=self._timeout))

    def _list_call(self, namespace: str | None, all_namespaces: bool) -> tuple[Any, ...]:
        if all_namespaces:
            return (self._custom.list_cluster_custom_object, t.GROUP, t.VERSION, t.PLURAL)
        return (self._custom.list_namespaced_custom_object, t.GROUP, t.VERSION, namespace or self.namespace,
                t.PLURAL)

    def _list(self, namespace: str | None, all_namespaces: bool, selector: str | None = None,
              field: str | None = None) -> dict[str, Any]:
        call, *args = self._list_call(namespace, all_namespaces)
        filters = {k: v for k, v in (("label_selector", selector), ("field_selector", field)) if v}
        return self._call(lambda: call(*args, _request_timeout=self._timeout, **filters))

    def _watch_one(self, name: str, ns: str, deadline: float | None,
                   until_deleted: bool = False) -> Iterator[dict[str, Any]]:
        """The job now, then on every change; ends when it is deleted (until_deleted) or
        raises NotFound then."""
        from kubernetes import watch

        def expired() -> WaitTimeout:
            # The deletion needs no operator (no finalizer); anything else waited for does.
            return WaitTimeout(f"error: timed out waiting for {OBJECT}/{name}{'' if until_deleted else unseen(obj)}")

        try:
            obj = self.get(name, ns)
        except NotFound:
            if until_deleted:
                return
            raise
        yield obj
        version = obj["metadata"]["resourceVersion"]
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise expired()
            seconds = int(min(WATCH_SECONDS, left)) + 1 if left is not None else WATCH_SECONDS
            stream = watch.Watch().stream(
                self._custom.list_namespaced_custom_object, t.GROUP, t.VERSION, ns, t.PLURAL,
                field_selector=f"metadata.name={name}", resource_version=version, timeout_seconds=seconds,
                _request_timeout=(CONNECT_TIMEOUT, seconds + WATCH_SLACK))
            try:
                for event in self._guard(stream):
                    obj = event["object"]
                    if event["type"] == "DELETED":
                        if until_deleted:
                            return
                        raise NotFound(f'Error from server (NotFound): {RESOURCE} "{name}" was deleted')
                    if event["type"] in ("ADDED", "MODIFIED"):
                        version = obj["metadata"]["resourceVersion"]
                        yield obj
                    if deadline is not None and time.monotonic() > deadline:
                        raise expired()
            except Expired:
                # Too old a version to resume from. The job's own version may be as old (a
                # job unchanged for long, a CRD changed since): a watch from it would expire
                # again at once. Read it with a list and go on from the list's version.
                listing = self._list(ns, False, field=f"metadata.name={name}")
                version = listing["metadata"]["resourceVersion"]
                if not listing["items"]:
                    if until_deleted:
                        return
                    raise NotFound(f'Error from server (NotFound): {RESOURCE} "{name}" was deleted')
                yield listing["items"][0]

    def _guard(self, stream: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """A watch stream with API errors mapped (the client raises a watch's ERROR event
        as an ApiException); 410 Gone, the version to resume from is too old, raises Expired."""
        it = iter(stream)
        while True:
            try:
                event = self._call(lambda: next(it, None))
            except DisttrainError as exc:
                if exc.status == 410:
                    raise Expired() from None
                raise
            if event is None:
                return
            yield event

    def _node_of(self, ns: str, pod: str) -> tuple[bool, str | None]:
        """(whether the pod exists, the node it is placed on)."""
        pods = self._call(lambda: self._core.list_namespaced_pod(
            ns, field_selector=f"metadata.name={pod}", _request_timeout=self._timeout)).items
        return bool(pods), pods[0].spec.node_name if pods else None

    def _kwok_node(self, ns: str, pod: str) -> str | None:
        """The node of a pod placed on a KWOK node (its log cannot be read: nothing runs);
        None on a real node, or when the node cannot be read (no rights on nodes)."""
        name = self._node_of(ns, pod)[1]
        try:
            node = name and self._call(lambda: self._core.read_node(name, _request_timeout=self._timeout),
                                       resource="nodes")
        except DisttrainError:
            return None
        return name if node and on_kwok(node) else None

    def _pod_log(self, ns: str, pod: str, index: int | None, follow: bool, options: dict[str, Any]
                 ) -> Iterator[LogLine]:
        def start() -> Any:
            # A plain read is one request (docs/cli.md); a followed log may stay quiet for long.
            limit = {} if follow else {"_request_timeout": self._timeout}
            given = {k: v for k, v in options.items() if v is not None}
            return self._core.read_namespaced_pod_log(
                pod, ns, container=CONTAINER_NAME, follow=follow, timestamps=True, _preload_content=False,
                **given, **limit)

        # -f on a worker the scheduler has not placed yet: wait for it (the API server answers the
        # log of a pod on no node with nothing, as if it had ended); a pod gone says so when read.
        while follow and (placed := self._node_of(ns, pod))[0] and not placed[1]:
            time.sleep(1)
        while True:
            try:
                response = self._call(start, resource="pods")
                break
            except DisttrainError as exc:
                # -f on a worker whose container has not started: wait.
                text = str(exc)
                starting = "(BadRequest)" in text and "waiting to start" in text
                if not (follow and starting):
                    # A pod of a KWOK node whose log KWOK was not given: no container ever ran.
                    node = None if starting else self._kwok_node(ns, pod)
                    if node:
                        raise NotFound(simulated(pod, node)) from None
                    raise
                time.sleep(1)
        from urllib3.exceptions import HTTPError

        try:
            for raw in response:
                stamp, _, text = raw.decode(errors="replace").rstrip("\n").partition(" ")
                yield LogLine(index, text, stamp)
        except HTTPError as exc:  # the server stopped answering, or the connection broke, mid-log
            raise self._unreachable(exc) from None
        finally:
            response.release_conn()

    def _call(self, fn: Any, *, resource: str = RESOURCE) -> Any:
        """fn() with the client's errors turned into kubectl's one-line messages. A 429 (the
        API server busy, or still building its cache of the jobs: a CRD just created or
        changed) is asked again after its Retry-After, BUSY_RETRIES times, as kubectl does;
        the request was not served, so that is safe for every verb."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        for attempt in range(BUSY_RETRIES + 1):
            try:
                return fn()
            except ApiException as exc:
                if exc.status == 429 and attempt < BUSY_RETRIES:
                    time.sleep(retry_after(exc.headers))
                    continue
                raise api_error(exc.status, exc.reason, exc.body, resource) from None
            except HTTPError as exc:
                raise self._unreachable(exc) from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _unreachable(self, exc: Exception) -> Unreachable:
        failure = connection_failure(exc)
        if failure == REFUSED:  # nothing listens there: a cluster that is down, or a server mistyped
            failure += (" Start the cluster (make cluster-up for a local one), or fix its server in "
                        f"{named(self._kubeconfig)}")
        return Unreachable(f"Unable to connect to the server {self._api.configuration.host}: {failure}")
