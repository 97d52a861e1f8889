"""charts/disttrain/values.schema.json, generated: types, enums and bounds for every value,
additionalProperties false on every object with fixed keys, so `helm install` with a value
of the wrong type or an unknown key fails naming it. The Kubernetes types among the values
(affinity, tolerations, label selectors) are the pinned API server's own schemas, vendored
in operator/disttrain/api/k8s_openapi.py (`make openapi`), made strict the same way.

    python hack/chart_values_schema.py           # print it
    python hack/chart_values_schema.py --write   # write it (make chart-docs)

tests/unit/test_chart_sources.py fails when the committed file differs from this output.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

HACK = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HACK)
sys.path[:0] = [HACK, os.path.join(ROOT, "operator")]

from disttrain.api import k8s  # noqa: E402
from chart_values_table import API_TYPE_MARK  # noqa: E402
from kubeconform_schemas import strict  # noqa: E402

PATH = os.path.join(ROOT, "charts", "disttrain", "values.schema.json")


def api_type(name: str, description: str) -> dict[str, Any]:
    """A Kubernetes type as the API server defines it, unknown fields refused. The mark
    names the type: the values table lists it as one value, not field by field."""
    return {**strict(k8s.schema(name, description_depth=0)), "description": description, API_TYPE_MARK: name}



def obj(desc: str, props: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """An object with fixed keys: any other key is refused."""
    return {"type": "object", "description": desc, "additionalProperties": False, "properties": props, **kw}


def boolean(d: str) -> dict[str, Any]:
    return {"type": "boolean", "description": d}


def string_map(d: str) -> dict[str, Any]:
    return {"type": "object", "description": d, "additionalProperties": {"type": "string"}}


def selector(d: str) -> dict[str, Any]:
    return api_type("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector", d)


def resources_map(d: str) -> dict[str, Any]:
    return {"type": "object", "description": d, "additionalProperties": QUANTITY}


DNS_LABEL = {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", "maxLength": 63}
QUANTITY = {"oneOf": [{"type": "string", "pattern": r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"},
                      {"type": "number", "minimum": 0}]}
DURATION = {"type": "string", "pattern": "^([0-9]+(ms|s|m|h|d|w|y))+$"}
PORT = {"type": "integer", "minimum": 1, "maximum": 65535}


def values_schema() -> dict[str, Any]:
    """The chart's values.schema.json."""
    return {
      "$schema": "http://json-schema.org/draft-07/schema#",
      "title": "disttrain chart values",
      "description": "Values of the disttrain operator chart. Unknown keys are refused (a typo fails the install instead of being ignored).",
      "type": "object",
      "additionalProperties": False,
      "properties": {
        "global": {"type": "object", "description": "global: Helm's values shared with subcharts; unused by this chart."},
        "image": obj("image: the operator image.", {
            "repository": {"type": "string", "minLength": 1, "description": "image.repository: the operator image without its tag."},
            "tag": {"type": "string", "description": "image.tag: the image tag; empty means the chart's appVersion. Use --set-string for numeric tags."},
            "pullPolicy": {"type": "string", "enum": ["Always", "IfNotPresent", "Never"], "description": "image.pullPolicy: the container's imagePullPolicy."}}),
        "imagePullSecrets": {"type": "array", "description": "imagePullSecrets: Secrets to pull the operator image with (core/v1 LocalObjectReference: {name}).",
                             "items": api_type("io.k8s.api.core.v1.LocalObjectReference", "A Secret in the release namespace.")},
        "trainerImage": obj("trainerImage: the image of every job that sets no spec.image, and the one instrument: auto copies disttrain from (DISTTRAIN_TRAINER_IMAGE). A job keeps the image it was first given.", {
            "repository": {"type": "string", "minLength": 1, "description": "trainerImage.repository: the trainer image without its tag, e.g. your registry's copy after make push."},
            "tag": {"type": "string", "description": "trainerImage.tag: the image tag; empty means the chart's appVersion. Use --set-string for numeric tags."}}),
        "nameOverride": {"type": "string", "maxLength": 40, "description": "nameOverride: resource names become <release>-<nameOverride> instead of <release>-operator; labels and selectors stay."},
        "fullnameOverride": {"type": "string", "maxLength": 52, "description": "fullnameOverride: the whole resource name prefix instead of <release>-operator; labels and selectors stay."},
        "serviceAccount": obj("serviceAccount: the operator's ServiceAccount.", {
            "create": boolean("serviceAccount.create: create it; false: run as an existing one, named by serviceAccount.name."),
            "name": {"type": "string", "description": "serviceAccount.name: its name; empty: the release's resource name (required when create is false)."},
            "annotations": string_map("serviceAccount.annotations: e.g. eks.amazonaws.com/role-arn or iam.gke.io/gcp-service-account, to bind it to a cloud identity.")}),
        "rbac": obj("rbac: the operator's ClusterRole or Roles and their bindings.", {
            "create": boolean("rbac.create: create them; false: grant the same rules yourself (charts/disttrain/rbac-rules*.yaml).")}),
        "watchNamespaces": {"type": "array", "uniqueItems": True, "items": {**DNS_LABEL, "description": "A namespace name."},
            "description": "watchNamespaces: the namespaces the operator watches. Empty: all namespaces (cluster-wide mode, a ClusterRole). A list: the namespaced mode, a Role and RoleBinding in each (docs/security.md)."},
        "replicaCount": {"type": "integer", "minimum": 0, "description": "replicaCount: operator replicas; more than one needs leaderElection.enabled (one works, the others stand by)."},
        "leaderElection": obj("leaderElection: replicas elect one active operator on a coordination.k8s.io Lease in the release namespace.", {
            "enabled": boolean("leaderElection.enabled: run with --leader-elect and grant the Lease (a Role in the release namespace only)."),
            "leaseSeconds": {"type": "number", "minimum": 3, "description": "leaderElection.leaseSeconds: a standby takes over when the leader has not renewed the Lease for this long (DISTTRAIN_LEASE_SECONDS)."}}),
        "kueue": obj("kueue: jobs labelled kueue.x-k8s.io/queue-name wait for Kueue's admission (docs/operations.md, Kueue).", {
            "enabled": boolean("kueue.enabled: DISTTRAIN_KUEUE=true and the Workload rights (manifests/kueue/rbac.yaml); needs Kueue v0.19+ and watchNamespaces empty.")}),
        "templates": obj("templates: training templates, settings a platform team sets once for many jobs (docs/platform.md).", {
            "readerGroups": {"type": "array", "items": {"type": "string", "minLength": 1}, "description": "templates.readerGroups: groups bound to the template-reader ClusterRole, so their users read the cluster's templates (a namespace's they read through view, edit and admin)."},
            "examples": boolean("templates.examples: install the example ClusterTrainingTemplates cpu, gpu-1 and gpu-8x (the chart's examples/templates/).")}),
        "resyncSeconds": {"type": "number", "exclusiveMinimum": 0, "description": "resyncSeconds: safety resync of a job with nothing happening (DISTTRAIN_RESYNC_SECONDS)."},
        "progressSeconds": {"type": "number", "exclusiveMinimum": 0, "description": "progressSeconds: how often a running trainer's /status is read (DISTTRAIN_PROGRESS_SECONDS)."},
        "restartBackoffSeconds": {"type": "number", "minimum": 0, "description": "restartBackoffSeconds: first back-off before recreating a crashed worker."},
        "restartBackoffMaxSeconds": {"type": "number", "minimum": 0, "description": "restartBackoffMaxSeconds: cap of that exponential back-off."},
        "logFormat": {"type": "string", "enum": ["json", "plain"], "description": "logFormat: the operator's log lines: one JSON object each, or kopf's plain text."},
        "apiQPS": {"type": "number", "exclusiveMinimum": 0, "description": "apiQPS: writes per second to the API server for the whole operator (DISTTRAIN_API_QPS)."},
        "apiBurst": {"type": "integer", "minimum": 1, "description": "apiBurst: writes allowed at once before the QPS pacing applies (DISTTRAIN_API_BURST)."},
        "workers": {"type": "integer", "minimum": 1, "description": "workers: jobs reconciled at once (DISTTRAIN_WORKERS)."},
        "extraEnv": {"type": "array", "description": "extraEnv: more environment variables for the operator container (core/v1 EnvVar), after the chart's own.",
                     "items": api_type("io.k8s.api.core.v1.EnvVar", "An environment variable.")},
        "extraArgs": {"type": "array", "items": {"type": "string"}, "description": "extraArgs: more arguments for disttrain-operator (e.g. -v), after the chart's own."},
        "podPolicy": obj("podPolicy: which namespaces' jobs may set podTemplate settings that leave the sandbox (docs/security.md).", {
            "allowAll": boolean("podPolicy.allowAll: allow podTemplate settings that leave the sandbox in every namespace."),
            "allowNamespaces": {"type": "array", "uniqueItems": True, "items": DNS_LABEL, "description": "podPolicy.allowNamespaces: allow podTemplate settings that leave the sandbox in these namespaces only."}}),
        "nodeHealth": obj("nodeHealth: what makes a Ready node unhealthy for training: its workers move off it, checkpoint first, and the job avoids it (docs/operations.md, Unhealthy nodes).", {
            "conditions": {"type": "array", "uniqueItems": True, "items": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._/-]*=(True|False|Unknown)$"}, "description": "nodeHealth.conditions: node conditions as TYPE=STATUS (DISTTRAIN_UNHEALTHY_NODE_CONDITIONS); [] for none."},
            "taints": {"type": "array", "uniqueItems": True, "items": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._/-]*$"}, "description": "nodeHealth.taints: taint keys whose NoSchedule or NoExecute taint makes the node unhealthy (DISTTRAIN_UNHEALTHY_NODE_TAINTS)."}}),
        "networkPolicy": obj("networkPolicy: a NetworkPolicy per job and one for the operator (needs a CNI that enforces it).", {
            "enabled": boolean("networkPolicy.enabled: give every job a NetworkPolicy (its workers accept traffic only from their own job, the operator and metricsFrom) and the operator's Pod one (only metricsFrom reaches its metrics port, which names every tenant's jobs); needs a CNI that enforces it."),
            "metricsFrom": {"type": "array", "description": "networkPolicy.metricsFrom: NetworkPolicyPeers allowed to scrape the workers' and the operator's metrics ports (where Prometheus runs).",
                "items": obj("A NetworkPolicyPeer.", {
                    "namespaceSelector": selector("namespaceSelector: namespaces by label."),
                    "podSelector": selector("podSelector: pods by label."),
                    "ipBlock": obj("ipBlock: a CIDR range.", {
                        "cidr": {"type": "string", "minLength": 1, "description": "cidr: the range."},
                        "except": {"type": "array", "items": {"type": "string"}, "description": "except: ranges left out."}}, required=["cidr"])})}}),
        "metrics": obj("metrics: the operator's Prometheus endpoint.", {
            "port": {**PORT, "description": "metrics.port: the /metrics port (container and Service)."},
            "auth": {"type": "string", "enum": ["kubernetes", "none"],
                     "description": "metrics.auth: kubernetes: HTTPS, only to callers the API server allows to get /metrics (TokenReview, SubjectAccessReview); none: plain HTTP to anyone who reaches the port."},
            "readers": {"type": "array", "description": "metrics.readers: subjects (rbac/v1 Subject: kind, name, namespace) bound to the chart's metrics-reader ClusterRole, e.g. Prometheus's ServiceAccount.",
                        "items": {"type": "object", "additionalProperties": False, "required": ["kind", "name"],
                                  "properties": {"kind": {"type": "string", "enum": ["ServiceAccount", "User", "Group"]},
                                                 "name": {"type": "string", "minLength": 1},
                                                 "namespace": DNS_LABEL,
                                                 "apiGroup": {"type": "string"}}}}}),
        "healthPort": {**PORT, "description": "healthPort: the /healthz port the probes use."},
        "resources": obj("resources: the operator container's requests and limits.", {
            "requests": resources_map("resources.requests: the operator container's requests (Kubernetes quantities)."),
            "limits": resources_map("resources.limits: the operator container's limits (Kubernetes quantities).")}),
        "podAnnotations": string_map("podAnnotations: annotations on the operator pod."),
        "podLabels": string_map("podLabels: labels added to the operator pod (its selector labels stay)."),
        "priorityClassName": {"type": "string", "description": "priorityClassName: the operator pod's PriorityClass; empty: none."},
        "nodeSelector": string_map("nodeSelector: node labels the operator pod needs."),
        "tolerations": {"type": "array", "description": "tolerations: taints the operator pod tolerates (core/v1 Toleration).",
                        "items": api_type(k8s.TOLERATION, "A toleration.")},
        "affinity": api_type(k8s.AFFINITY, "affinity: the operator pod's affinity (core/v1 Affinity)."),
        "topologySpreadConstraints": {"type": "array", "description": "topologySpreadConstraints: how replicas spread over zones or nodes (core/v1 TopologySpreadConstraint).",
                                      "items": api_type("io.k8s.api.core.v1.TopologySpreadConstraint", "A constraint.")},
        "podSecurityContext": api_type("io.k8s.api.core.v1.PodSecurityContext", "podSecurityContext: the operator pod's securityContext; the defaults meet PSA restricted, keys you set are merged over them."),
        "securityContext": api_type("io.k8s.api.core.v1.SecurityContext", "securityContext: the operator container's securityContext; the defaults meet PSA restricted, keys you set are merged over them."),
        "podDisruptionBudget": obj("podDisruptionBudget: a PodDisruptionBudget for the operator pods.", {
            "enabled": boolean("podDisruptionBudget.enabled: create it (useful with replicaCount > 1 and leader election)."),
            "maxUnavailable": {"oneOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[0-9]+%$"}],
                               "description": "podDisruptionBudget.maxUnavailable: operator pods a voluntary disruption may take at once (a number or a percentage)."}}),
        "serviceMonitor": obj("serviceMonitor: a Prometheus Operator ServiceMonitor for the operator (needs the monitoring.coreos.com CRDs).", {
            "enabled": boolean("serviceMonitor.enabled: create a ServiceMonitor for the operator (needs the Prometheus Operator's CRDs)."),
            "interval": {**DURATION, "description": "serviceMonitor.interval: the operator's scrape interval (a Prometheus duration, e.g. 30s)."},
            "labels": string_map("serviceMonitor.labels: extra labels on it, e.g. the ones your Prometheus selects.")}),
        "podMonitor": obj("podMonitor: a PodMonitor scraping the trainer pods' /metrics.", {
            "enabled": boolean("podMonitor.enabled: create a PodMonitor scraping every trainer pod's /metrics."),
            "interval": {**DURATION, "description": "podMonitor.interval: the trainers' scrape interval (a Prometheus duration)."},
            "labels": string_map("podMonitor.labels: extra labels on it.")}),
        "prometheusRule": obj("prometheusRule: the alert rules (job failed, stalled, checkpoint too old, restarting often).", {
            "enabled": boolean("prometheusRule.enabled: create the alert rules as a PrometheusRule."),
            "labels": string_map("prometheusRule.labels: extra labels on it."),
            "stallMinutes": {"type": "integer", "minimum": 1, "description": "prometheusRule.stallMinutes: a running job whose step has not moved this long is stalled."},
            "checkpointMaxAgeMinutes": {"type": "integer", "minimum": 1, "description": "prometheusRule.checkpointMaxAgeMinutes: a newest checkpoint older than this fires DistTrainCheckpointTooOld."}}),
        "dashboards": obj("dashboards: the Grafana dashboards as ConfigMaps for the Grafana sidecar.", {
            "enabled": boolean("dashboards.enabled: create the two Grafana dashboards (operator, training) as ConfigMaps."),
            "labels": string_map("dashboards.labels: the labels the Grafana sidecar looks for.")}),
      },
    }


def render() -> str:
    return json.dumps(values_schema(), indent=2) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--write"]:
        with open(PATH, "w") as handle:
            handle.write(render())
    elif argv:
        print("usage: chart_values_schema.py [--write]", file=sys.stderr)
        return 2
    else:
        sys.stdout.write(render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
