"""Least privilege, asked of the API server: for each install mode, the RBAC as shipped is
applied and SubjectAccessReviews ask what the operator's account may do. Every call the
operator makes (disttrain/operator/permissions.py: the code refuses any other) must be
allowed where it must work; every other verb on those resources, every such call outside
the namespaces it watches, and a sample of what no operator needs (secrets, exec, tokens,
RBAC, cluster-scoped writes) must be denied.

The kustomize modes' objects are renamed (disttrain-system, disttrain-operator, ...) so
they cannot mix with the RBAC the other tests run the operator with; the rules are as
shipped. Run with -s to see each mode's table."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from disttrain.integrations.kueue.shell import Kueue
from disttrain.operator import permissions as p
from operator_reading import chart_objects, kustomize_text, operator_deployment, operator_reading

pytestmark = [pytest.mark.cluster]

REPO = Path(__file__).resolve().parents[2]
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")

# Calls no operator needs: each must be denied in every mode.
FORBIDDEN = [
    ("get", "", "secrets", ""), ("list", "", "secrets", ""), ("watch", "", "secrets", ""),
    ("get", "", "configmaps", ""), ("create", "", "pods", "exec"), ("create", "", "serviceaccounts", "token"),
    ("create", "rbac.authorization.k8s.io", "roles", ""), ("create", "rbac.authorization.k8s.io", "rolebindings", ""),
    ("create", "", "services", "proxy"),
]
FORBIDDEN_CLUSTER = [
    ("create", "", "namespaces", ""), ("delete", "", "namespaces", ""), ("patch", "", "nodes", ""),
    ("delete", "", "nodes", ""), ("create", "rbac.authorization.k8s.io", "clusterroles", ""),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", ""),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("update", "apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("delete", "apiextensions.k8s.io", "customresourcedefinitions", ""),
    ("create", "certificates.k8s.io", "certificatesigningrequests", ""),
]


@dataclass
class Mode:
    name: str
    rendered: list[dict]        # the install's objects
    kueue: bool
    account_name: str | None = None  # the account the values name, where they name one
    anywhere: tuple[str, ...] = ("lp-anywhere",)  # where a cluster-wide operator is asked to work
    unwatched: str = "lp-elsewhere"               # where a namespaced one must not touch

    @property
    def objects(self) -> list[dict]:
        return [o for o in self.rendered if o["kind"] in RBAC_KINDS]

    @functools.cached_property
    def clusterwide(self) -> bool:
        return self._args.all_namespaces

    @functools.cached_property
    def watched(self) -> tuple[str, ...]:
        """The namespaces it must work in: those its arguments name, else a sample."""
        return self.anywhere if self.clusterwide else tuple(self._args.namespaces)

    @functools.cached_property
    def _args(self):
        """The install's operator arguments, parsed once (expectations ask per call)."""
        return operator_reading(operator_deployment(self.rendered))[0]

    @property
    def account(self) -> tuple[str, str]:
        sa = next(o for o in self.objects if o["kind"] == "ServiceAccount")
        return sa["metadata"]["namespace"], sa["metadata"]["name"]


def kustomize_install(cluster, path: Path, prefix: str) -> list[dict]:
    return _renamed(kustomize_text(cluster, path), prefix)


def _renamed(text: str, prefix: str) -> list[dict]:
    for name in ("disttrain-system", "disttrain-jobs", "disttrain-operator"):
        text = text.replace(name, f"{prefix}-{name.split('-', 1)[1]}")
    return [d for d in yaml.safe_load_all(text) if d]


def modes(cluster) -> list[Mode]:
    kueue_rbac = (REPO / "manifests" / "kueue" / "rbac.yaml").read_text()
    return [
        Mode("chart, cluster-wide", chart_objects(cluster, "lp-cw", "lp-cw-system"), kueue=False,
             anywhere=("lp-anywhere", "lp-cw-system")),
        Mode("chart, cluster-wide, kueue.enabled", chart_objects(cluster, "lp-cq", "lp-cq-system", "--set", "kueue.enabled=true"),
             kueue=True),
        # Its own names too: the Roles' bindings must name the account the chart creates.
        Mode("chart, namespaced (watching two other namespaces), nameOverride, serviceAccount.name",
             chart_objects(cluster, "lp-ns", "lp-ns-system", "--set", "watchNamespaces={lp-team-a,lp-team-b}",
                       "--set", "nameOverride=trainer-ctl", "--set", "serviceAccount.name=lp-ns-controller"),
             kueue=False, account_name="lp-ns-controller", unwatched="lp-ns-system"),
        Mode("kustomize manifests/ and manifests/kueue",
             kustomize_install(cluster, REPO / "manifests", "lp-kc") + _renamed(kueue_rbac, "lp-kc"), kueue=True),
        Mode("kustomize manifests/namespaced", kustomize_install(cluster, REPO / "manifests" / "namespaced", "lp-kn"),
             kueue=False),
    ]


def expectations(mode: Mode) -> list[tuple[str, str, str, str, str | None, bool]]:
    """(verb, group, resource, subresource, namespace, allowed) to ask for this mode."""
    own = mode.account[0]
    where = {p.WATCHED: mode.watched, p.OWN: (own,), p.CLUSTER: (None,)}
    out = []
    allowed: dict[tuple[str, str], set[str]] = {}
    for u in p.USES:
        on = u.feature == p.ALWAYS or (u.feature == Kueue.feature and mode.kueue)
        resource, _, sub = u.resource.partition("/")
        if on:
            allowed.setdefault((u.group, u.resource), set()).update(u.verbs)
        for verb in sorted(u.verbs):
            for ns in where[u.scope]:
                out.append((verb, u.group, resource, sub, ns, on))
            if on and u.scope == p.WATCHED and not mode.clusterwide:
                out.append((verb, u.group, resource, sub, mode.unwatched, False))
            if on and u.scope == p.WATCHED and verb in ("list", "watch"):  # kopf's watch of every namespace
                out.append((verb, u.group, resource, sub, None, mode.clusterwide))
            if on and u.scope == p.OWN and own not in mode.watched:
                out.append((verb, u.group, resource, sub, mode.watched[0], False))
    for u in p.USES:  # every other verb on the resources it uses: denied
        resource, _, sub = u.resource.partition("/")
        for verb in p.VERBS:
            if verb not in allowed.get((u.group, u.resource), set()):
                out.append((verb, u.group, resource, sub, where[u.scope][0], False))
    out += [(v, g, r, s, mode.watched[0], False) for v, g, r, s in FORBIDDEN]
    out += [(v, g, r, s, None, False) for v, g, r, s in FORBIDDEN_CLUSTER]
    return sorted(set(out), key=lambda e: (not e[5], e[1], e[2], e[3], e[0], e[4] or ""))


def ask(api, account: tuple[str, str], verb: str, group: str, resource: str, sub: str, ns: str | None) -> bool:
    from kubernetes import client
    namespace, name = account
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{namespace}:{name}",
        groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
        resource_attributes=client.V1ResourceAttributes(verb=verb, group=group, resource=resource,
                                                        subresource=sub or None, namespace=ns)))
    return api.create_subject_access_review(review).status.allowed


def test_each_install_mode_allows_exactly_what_the_operator_calls(cluster):
    from kubernetes import client, config
    api = client.AuthorizationV1Api(config.new_client_from_config(cluster.kubeconfig))
    applied: list[dict] = []
    wrong: list[str] = []
    try:
        for mode in modes(cluster):
            namespaces = {o["metadata"].get("namespace") for o in mode.objects} - {None}
            for ns in sorted(namespaces):
                cluster.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
                applied.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            cluster.apply(mode.objects)
            applied += mode.objects
            assert mode.account_name in (None, mode.account[1]), f"{mode.name}: the chart made {mode.account}"
            checks = expectations(mode)
            # The authorizer reads RBAC from an informer: answers may predate the objects just
            # applied. Wait until every grant the mode must give is in force (grants only add,
            # so what is denied after that is denied by the objects as shipped).
            pending = [c[:5] for c in checks if c[5]]

            def in_force() -> bool:
                pending[:] = [c for c in pending if not ask(api, mode.account, *c)]
                return not pending
            cluster.wait_for(in_force, timeout=120, what=f"{mode.name}: its grants to be in force",
                             describe=lambda: f"never allowed: {pending}")
            table = [f"\n{mode.name}: {mode.account[0]}/{mode.account[1]}", "| verb | resource | namespace | must | is |",
                     "| --- | --- | --- | --- | --- |"]
            for verb, group, resource, sub, ns, must in checks:
                got = ask(api, mode.account, verb, group, resource, sub, ns)
                name = f"{resource}{'/' + sub if sub else ''}{'.' + group if group else ''}"
                table.append(f"| {verb} | {name} | {ns or '(cluster)'} | {'allow' if must else 'deny'} | "
                             f"{'allowed' if got else 'denied'} |")
                if got != must:
                    wrong.append(f"{mode.name}: {verb} {name} in {ns or '(cluster)'}: "
                                 f"{'allowed' if got else 'denied'}, must be {'allowed' if must else 'denied'}")
            print("\n".join(table))
            assert sum(c[5] for c in checks) >= 20 and sum(not c[5] for c in checks) >= 40, mode.name
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", "--wait=false",
                        input=yaml.safe_dump_all(list(reversed(applied))), check=False)
    assert wrong == []
