"""Everything the operator asks the Kubernetes API for: each verb on each resource, where,
and why. It is the operator's side of least privilege:

- `Kube.request` classifies every call it makes (`classify`) and refuses one this table
  does not list (the pod watch of informer.py included), so the table cannot fall behind
  the code; kopf's watches are the other `list`/`watch` rows (the handlers' resources,
  plus kopf's own observers of namespaces and CRDs);
- tests/cluster/test_least_privilege.py applies the RBAC of each install mode as shipped
  and asks the API server (SubjectAccessReview) whether the operator's account may do each
  row where it must, and nothing else on these resources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from disttrain.integrations.registry import REGISTRY

# Where a row applies: in each namespace the operator watches (every namespace when it
# watches the whole cluster), in its own namespace only, or cluster-scoped.
WATCHED, OWN, CLUSTER = "watched", "own", "cluster"
# Rows of a feature apply only when it is on (an integration's install switch, the chart's
# `<feature>.enabled`); ALWAYS rows apply always.
ALWAYS = ""
FEATURES = tuple(sorted({kind.feature for kind in REGISTRY} - {ALWAYS}))

VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")


@dataclass(frozen=True)
class Use:
    group: str
    resource: str  # with its subresource: "distributedtrainings/status"
    verbs: frozenset[str]
    scope: str
    why: str
    feature: str = ALWAYS


def _use(group: str, resource: str, verbs: str, scope: str, why: str, feature: str = ALWAYS) -> Use:
    return Use(group, resource, frozenset(verbs.split()), scope, why, feature)


OWN_USES: tuple[Use, ...] = (
    _use("disttrain.dev", "distributedtrainings", "list watch get delete", WATCHED,
         "kopf watches the jobs; the job of a name is read before acting on a view that may be stale; TTL deletes"),
    _use("disttrain.dev", "distributedtrainings", "patch", WATCHED,
         "kopf removes the finalizer older versions of the operator added, when such a job is deleted"),
    _use("disttrain.dev", "distributedtrainings/status", "patch", WATCHED, "the job's status"),
    _use("", "pods", "list watch create get delete", WATCHED,
         "the workers: listed and watched (informer.py), created, read on a name conflict, deleted to restart"),
    _use("", "services", "create get", WATCHED, "the rendezvous Service, restored when deleted"),
    _use("networking.k8s.io", "networkpolicies", "create get", WATCHED, "the job's NetworkPolicy"),
    _use("policy", "poddisruptionbudgets", "create get", WATCHED, "keeps voluntary evictions off running workers"),
    _use("", "events", "create", WATCHED, "Events about the jobs"),
    _use("coordination.k8s.io", "leases", "get create update", OWN, "leader election"),
    _use("", "nodes", "list watch", CLUSTER, "node health: lost and cordoned nodes"),
    _use("disttrain.dev", "trainingtemplates", "list watch", WATCHED,
         "the training templates jobs name (templates.py): read, never written"),
    _use("disttrain.dev", "clustertrainingtemplates", "list watch", CLUSTER,
         "the cluster's training templates jobs name: read, never written"),
    _use("", "namespaces", "list watch", CLUSTER, "kopf's namespace observer"),
    _use("apiextensions.k8s.io", "customresourcedefinitions", "list watch", CLUSTER, "kopf's resource observer; the CRDs of our watches, followed as they go and come back (crds.py)"),
    _use("authentication.k8s.io", "tokenreviews", "create", CLUSTER,
         "/metrics: whose bearer token a scraper sent (metrics_serving.py)"),
    _use("authorization.k8s.io", "subjectaccessreviews", "create", CLUSTER,
         "/metrics: whether that caller may get /metrics"),
)


# Each integration declares its own rows (integrations/protocol.py), under its feature.
USES: tuple[Use, ...] = OWN_USES + tuple(
    _use(u.group, u.resource, u.verbs, u.scope, u.why, kind.feature) for kind in REGISTRY for u in kind.uses)


class UndeclaredApiUse(Exception):
    """A call the table does not list: a bug of the operator, never sent."""


_PATH = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[^/]+)/[^/]+)"
                   r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[^/]+)(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$")
_METHOD_VERB = {"POST": "create", "PUT": "update", "PATCH": "patch"}


def classify(method: str, path: str, params: dict[str, str] | None = None) -> tuple[str, str, str]:
    """(verb, group, resource[/subresource]) of a REST call, as RBAC names them."""
    found = _PATH.match(path.split("?", 1)[0])
    if not found:
        raise UndeclaredApiUse(f"{method} {path}: not a resource path")
    resource = found["resource"] + (f"/{found['sub']}" if found["sub"] else "")
    named = found["name"] is not None
    if method == "GET":
        verb = "get" if named else ("watch" if (params or {}).get("watch") in ("true", "1") else "list")
    elif method == "DELETE":
        verb = "delete" if named else "deletecollection"
    else:
        verb = _METHOD_VERB.get(method, method.lower())
    return verb, found["group"] or "", resource


# (verb, group, resource) of every row: what check() looks up on each request.
_DECLARED = frozenset((verb, u.group, u.resource) for u in USES for verb in u.verbs)


# Discovery of one group version (which resources it serves): open to every authenticated
# account (the built-in system:discovery role), so no RBAC row; the one call not a resource.
DISCOVERY = re.compile(r"^/apis/[^/]+/[^/]+$")


def check(method: str, path: str, params: dict[str, str] | None = None) -> None:
    """Raise UndeclaredApiUse unless the table lists this call (or it is discovery)."""
    if method == "GET" and DISCOVERY.match(path.split("?", 1)[0]):
        return
    verb, group, resource = classify(method, path, params)
    if (verb, group, resource) not in _DECLARED:
        raise UndeclaredApiUse(f"{verb} {resource}{'.' + group if group else ''} ({method} {path}) is not in "
                               "disttrain/operator/permissions.py: add it there and to the RBAC of every install mode")
