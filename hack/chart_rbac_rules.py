"""The operator's RBAC rules from one source, manifests/rbac/cluster-role.yaml.

    python hack/chart_rbac_rules.py            # print the chart's rbac-rules.yaml (cluster-wide)
    python hack/chart_rbac_rules.py --write    # write every derived file (run by `make crd`)

The namespaced install mode splits the same rules: what acts on namespaced resources goes
into a Role bound in each watched namespace; of the cluster-scoped rules it keeps only the
read-only ones kopf needs to start (CRDs, namespaces), the node watch that sees a
worker's node lost, the watch of the cluster's training templates, the device taints of DRA, and the token and access reviews /metrics asks for its callers. The
Kueue rules (manifests/kueue/rbac.yaml) become the chart's rbac-rules-kueue.yaml, granted
with kueue.enabled. The leader-election Lease is
granted apart, in the operator's own namespace only (manifests/rbac/leader-election.yaml).
"""

import copy
import pathlib
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLUSTER_SCOPED = {"customresourcedefinitions", "namespaces", "nodes", "clustertrainingtemplates", "tokenreviews",
                  "subjectaccessreviews", "resourceslices", "devicetaintrules"}
READ_ONLY = {"get", "list", "watch"}
# A review is created only to read its verdict back: nothing is stored or changed.
REVIEWS = {"tokenreviews", "subjectaccessreviews"}
HEADER = "# Generated from manifests/rbac/cluster-role.yaml by `make crd`; do not edit.\n"
LABELS = {"app.kubernetes.io/name": "disttrain", "app.kubernetes.io/component": "operator"}


def rules() -> list[dict]:
    return yaml.safe_load((ROOT / "manifests" / "rbac" / "cluster-role.yaml").read_text())["rules"]


def split(all_rules: list[dict]) -> tuple[list[dict], list[dict]]:
    """(namespaced rules, cluster-scoped read-only rules) for the namespaced mode."""
    namespaced, cluster = [], []
    for rule in all_rules:
        local = [r for r in rule["resources"] if r not in CLUSTER_SCOPED]
        scoped = [r for r in rule["resources"] if r in CLUSTER_SCOPED]
        if local:
            namespaced.append({**copy.deepcopy(rule), "resources": local})
        if scoped:
            if not set(rule["verbs"]) <= READ_ONLY | ({"create"} if set(scoped) <= REVIEWS else set()):
                raise SystemExit(f"cluster-scoped rule {rule} is not read-only")
            cluster.append({**copy.deepcopy(rule), "resources": scoped})
    return namespaced, cluster


def overlay_objects(namespaced: list[dict], cluster: list[dict]) -> str:
    """manifests/namespaced/rbac.yaml: the Role, the read-only ClusterRole and bindings."""
    name, sa_ns, watched = "disttrain-operator", "disttrain-system", "disttrain-jobs"
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": sa_ns}]
    docs = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": name, "namespace": watched, "labels": LABELS}, "rules": namespaced},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": name, "namespace": watched, "labels": LABELS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": subject},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": f"{name}-read", "labels": LABELS}, "rules": cluster},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": f"{name}-read", "labels": LABELS},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{name}-read"},
         "subjects": subject},
    ]
    return (HEADER + f"# One Role + RoleBinding per watched namespace ({watched} here: copy both for each\n"
            "# namespace you add to the Deployment's --namespace flags).\n"
            + yaml.safe_dump_all(docs, sort_keys=False))


def main() -> None:
    all_rules = rules()
    if "--write" not in sys.argv:
        sys.stdout.write(HEADER + yaml.safe_dump(all_rules, sort_keys=False))
        return
    namespaced, cluster = split(all_rules)
    chart = ROOT / "charts" / "disttrain"
    (chart / "rbac-rules.yaml").write_text(HEADER + yaml.safe_dump(all_rules, sort_keys=False))
    (chart / "rbac-rules-namespaced.yaml").write_text(HEADER + yaml.safe_dump(namespaced, sort_keys=False))
    (chart / "rbac-rules-cluster-read.yaml").write_text(HEADER + yaml.safe_dump(cluster, sort_keys=False))
    (ROOT / "manifests" / "namespaced" / "rbac.yaml").write_text(overlay_objects(namespaced, cluster))
    kueue = next(yaml.safe_load_all((ROOT / "manifests" / "kueue" / "rbac.yaml").read_text()))["rules"]
    (chart / "rbac-rules-kueue.yaml").write_text(HEADER.replace("cluster-role.yaml", "../kueue/rbac.yaml")
                                                 + yaml.safe_dump(kueue, sort_keys=False))


if __name__ == "__main__":
    main()
