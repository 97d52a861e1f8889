"""The Helm chart with real helm, a real API server and real promtool."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import yaml

from api_schemas import kubeconform, problems
from operator_reading import operator_deployment, operator_reading
from unit.exported_metrics import METRICS, metric_names

pytestmark = pytest.mark.cluster

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(REPO, "charts", "disttrain")
ALL_ON = ["--set", "serviceMonitor.enabled=true", "--set", "podMonitor.enabled=true",
          "--set", "prometheusRule.enabled=true", "--set", "dashboards.enabled=true",
          "--set", "replicaCount=2", "--set", "kueue.enabled=true"]
# Value sets the chart is linted and kubeconform-checked with: the default, everything
# on, the namespaced mode, and other non-default values.
VALUE_SETS = {
    "default": [],
    "monitoring-dashboards-two-replicas": ALL_ON,
    "namespaced": ["--set", "watchNamespaces={team-a,team-b}", "--set", "podPolicy.allowNamespaces={team-a}",
                   "--set", "replicaCount=2"],
    "other-values": ["--set", "leaderElection.enabled=false", "--set", "leaderElection.leaseSeconds=30", "--set", "networkPolicy.enabled=false",
                     "--set", "logFormat=plain", "--set", "metrics.port=9090", "--set", "healthPort=9091",
                     "--set-string", "image.tag=0.2.0", "--set", "image.pullPolicy=Always",
                     "--set", "nodeSelector.pool=system", "--set", "tolerations[0].key=dedicated",
                     "--set", "tolerations[0].operator=Exists", "--set", "tolerations[0].effect=NoSchedule",
                     "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                              ".nodeSelectorTerms[0].matchExpressions[0].key=pool",
                     "--set", "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                              ".nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
                     "--set", "resources.requests.cpu=50m", "--set", "resources.limits.cpu=1"],
    # What a platform team sets: its own account and RBAC, a private registry, priority,
    # spreading, a disruption budget, the write pace, extra settings.
    "platform-team": ["--set", "serviceAccount.create=false", "--set", "serviceAccount.name=ops-disttrain",
                      "--set", "rbac.create=false", "--set", "nameOverride=dt",
                      "--set", "imagePullSecrets[0].name=regcred", "--set", "priorityClassName=system-cluster-critical",
                      "--set", "image.repository=registry.example.com/ml/operator",
                      "--set", "trainerImage.repository=registry.example.com/ml/trainer",
                      "--set-string", "trainerImage.tag=0.1.0-patched",
                      "--set-json", "nodeHealth.conditions=[]", "--set", "nodeHealth.taints[0]=example.com/gpu-health",
                      "--set", "podAnnotations.team=ml-platform", "--set", "podLabels.cost-center=ml",
                      "--set", "topologySpreadConstraints[0].maxSkew=1",
                      "--set", "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
                      "--set", "topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
                      "--set", "topologySpreadConstraints[0].labelSelector.matchLabels.app\\.kubernetes\\.io/name=disttrain",
                      "--set", "podSecurityContext.runAsUser=2000", "--set", "securityContext.privileged=false",
                      "--set", "podDisruptionBudget.enabled=true", "--set", "replicaCount=2",
                      "--set", "apiQPS=200", "--set", "apiBurst=400", "--set", "workers=32",
                      "--set", "extraEnv[0].name=DISTTRAIN_LEASE_NAME", "--set", "extraEnv[0].value=dt-leader",
                      "--set", "extraArgs={-v}"],
    # What a monitoring stack selects on (kube-prometheus-stack's `release` label, Grafana's
    # sidecar label) and the alert and restart timings tuned.
    "monitoring-tuned": [*ALL_ON, "--set", "serviceMonitor.labels.release=kps", "--set", "podMonitor.labels.release=kps",
                         "--set", "prometheusRule.labels.release=kps", "--set", "prometheusRule.stallMinutes=5",
                         "--set", "prometheusRule.checkpointMaxAgeMinutes=30",
                         "--set-string", "dashboards.labels.grafana_dashboard=yes",
                         "--set", "restartBackoffSeconds=5", "--set", "restartBackoffMaxSeconds=120"],
    "cloud-identity": ["--set", "fullnameOverride=ml-operator",
                       "--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/dt"],
}


def helm(cluster, *args: str) -> str:
    proc = subprocess.run([str(cluster.bin_dir / "helm"), *args], capture_output=True, text=True, env=cluster.env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def helm_fails(cluster, *args: str) -> str:
    proc = subprocess.run([str(cluster.bin_dir / "helm"), *args], capture_output=True, text=True, env=cluster.env)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_chart_lints_strict(cluster, values):
    assert "0 chart(s) failed" in helm(cluster, "lint", "--strict", CHART, *values)


def test_rendered_chart_passes_kubeconform_strict(cluster, tmp_path):
    """Every value set, in one kubeconform run (it compiles the schemas once)."""
    files = {}
    for name, values in VALUE_SETS.items():
        files[name] = tmp_path / f"{name}.yaml"
        files[name].write_text(helm(cluster, "template", "disttrain", CHART, "-n", "disttrain-system", *values))
    results = kubeconform(cluster, *map(str, files.values()))
    for name, path in files.items():
        rendered = [d for d in yaml.safe_load_all(path.read_text()) if d]
        assert sum(r["filename"] == str(path) for r in results) == len(rendered), name
    namespaced = [r for r in results if r["filename"] == str(files["namespaced"])]
    assert sum(r["kind"] == "Role" for r in namespaced) == 3  # team-a, team-b, and the Lease's
    assert "Role" not in {r["kind"] for r in results if r["filename"] == str(files["other-values"])}
    assert not problems(results), "\n".join(problems(results))


def test_kubeconform_refuses_a_misspelt_field(cluster):
    """The strict schemas fail an unknown field deep in an object, as the API server would."""
    docs = [d for d in yaml.safe_load_all(helm(cluster, "template", "disttrain", CHART)) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbes"] = {}
    (result,) = kubeconform(cluster, text=yaml.safe_dump(deployment))
    assert result["status"] == "statusInvalid" and "readinessProbes" in result["msg"], result


def test_helm_install_refuses_a_value_of_the_wrong_type_naming_it(cluster, namespace):
    err = helm_fails(cluster, "install", "bad-type", CHART, "-n", namespace, "--set", "metrics.port=metrics")
    assert "/metrics/port" in err and "want integer" in err, err
    err = helm_fails(cluster, "install", "bad-enum", CHART, "-n", namespace, "--set", "logFormat=yaml")
    assert "/logFormat" in err and "'json', 'plain'" in err, err
    assert "bad-type" not in helm(cluster, "list", "-n", namespace, "-q")


def test_helm_install_refuses_an_unknown_key_naming_it(cluster, namespace):
    err = helm_fails(cluster, "install", "typo", CHART, "-n", namespace, "--set", "serviceMonitor.enable=true")
    assert "/serviceMonitor" in err and "'enable' not allowed" in err, err
    err = helm_fails(cluster, "install", "typo", CHART, "-n", namespace, "--set", "imagee.tag=x")
    assert "'imagee' not allowed" in err, err
    assert helm(cluster, "list", "-n", namespace, "-q").strip() == ""


def rendered(cluster, *values: str) -> dict[tuple[str, str], dict]:
    docs = yaml.safe_load_all(helm(cluster, "template", "rel", CHART, "-n", "ops", *values))
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d}


def test_platform_values_land_where_kubernetes_reads_them(cluster):
    objects = rendered(cluster, *VALUE_SETS["platform-team"])
    assert not {kind for kind, _ in objects} & {"ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                               "ClusterRoleBinding"}  # both are the platform's own
    deployment = objects[("Deployment", "rel-dt")]
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"team": "ml-platform"}
    assert pod["metadata"]["labels"]["cost-center"] == "ml"
    assert pod["metadata"]["labels"]["app.kubernetes.io/name"] == "disttrain"  # the per-job NetworkPolicy admits it by this
    spec = pod["spec"]
    assert spec["serviceAccountName"] == "ops-disttrain" and spec["imagePullSecrets"] == [{"name": "regcred"}]
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["topologySpreadConstraints"][0]["topologyKey"] == "topology.kubernetes.io/zone"
    assert spec["securityContext"] == {"runAsNonRoot": True, "runAsUser": 2000, "seccompProfile": {"type": "RuntimeDefault"}}
    container = spec["containers"][0]
    assert container["securityContext"]["privileged"] is False and container["securityContext"]["readOnlyRootFilesystem"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["DISTTRAIN_API_QPS"], env["DISTTRAIN_API_BURST"], env["DISTTRAIN_WORKERS"]) == ("200", "400", "32")
    assert env["DISTTRAIN_LEASE_NAME"] == "dt-leader" and container["args"][-1] == "-v"
    assert container["image"] == "registry.example.com/ml/operator:0.1.0"  # the tag: the chart's appVersion
    assert env["DISTTRAIN_TRAINER_IMAGE"] == "registry.example.com/ml/trainer:0.1.0-patched"
    # nodeHealth: no condition watched (an empty list is "none", not the default), one taint.
    assert (env["DISTTRAIN_UNHEALTHY_NODE_CONDITIONS"], env["DISTTRAIN_UNHEALTHY_NODE_TAINTS"]) == (
        "none", "example.com/gpu-health")
    from disttrain.operator.settings import Settings
    rules = Settings.from_env(env).node_rules()
    assert (rules.conditions, rules.taints) == (frozenset(), {"example.com/gpu-health"})
    pdb = objects[("PodDisruptionBudget", "rel-dt")]
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()  # it covers the operator pods
    identity = rendered(cluster, *VALUE_SETS["cloud-identity"])
    account = identity[("ServiceAccount", "ml-operator")]
    assert account["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/dt"}
    assert identity[("ClusterRoleBinding", "ml-operator")]["subjects"][0]["name"] == "ml-operator"
    assert identity[("Deployment", "ml-operator")]["spec"]["template"]["spec"]["serviceAccountName"] == "ml-operator"


def test_monitoring_and_restart_values_land_where_their_readers_look(cluster):
    objects = rendered(cluster, *VALUE_SETS["monitoring-tuned"])
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        monitors = [d for (k, _), d in objects.items() if k == kind]
        assert len(monitors) == 1 and monitors[0]["metadata"]["labels"]["release"] == "kps", kind
    rule = next(d for (k, _), d in objects.items() if k == "PrometheusRule")
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    stalled, old = alerts["DistTrainJobStalled"], alerts["DistTrainCheckpointTooOld"]
    assert "changes(disttrain_train_step[5m])" in stalled["expr"] and "in 5 minutes" in stalled["annotations"]["summary"]
    assert old["expr"].strip().endswith("> 1800") and "older than 30 minutes" in old["annotations"]["summary"]
    dashboards = [d for (k, _), d in objects.items() if k == "ConfigMap" and any(n.endswith(".json") for n in d.get("data", {}))]
    assert dashboards and all(d["metadata"]["labels"]["grafana_dashboard"] == "yes" for d in dashboards)
    deployment = next(d for (k, _), d in objects.items() if k == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["DISTTRAIN_RESTART_BACKOFF_SECONDS"], env["DISTTRAIN_RESTART_BACKOFF_MAX_SECONDS"]) == ("5", "120")


def test_an_existing_account_must_be_named(cluster):
    err = helm_fails(cluster, "template", "x", CHART, "--set", "serviceAccount.create=false")
    assert "serviceAccount.name: with serviceAccount.create=false, name the ServiceAccount" in err, err


def test_replicas_without_leader_election_fail_saying_why(cluster):
    err = helm_fails(cluster, "template", "x", CHART, "--set", "replicaCount=2", "--set", "leaderElection.enabled=false")
    assert "replicaCount > 1 needs leaderElection.enabled=true" in err, err


def test_one_port_for_metrics_and_health_fails_saying_why(cluster):
    err = helm_fails(cluster, "template", "x", CHART, "--set", "metrics.port=9000", "--set", "healthPort=9000")
    assert "metrics.port and healthPort are both 9000" in err, err


def test_notes_print_the_next_commands(cluster):
    out = helm(cluster, "install", "--dry-run=client", "dt", CHART, "-n", "ops")
    notes = out[out.index("NOTES:"):]
    assert "kubectl -n ops rollout status deployment/dt-operator" in notes
    assert "kubectl -n default apply -f manifests/examples/cpu-ddp-2x1.yaml" in notes
    # The example's claim is not shipped: the notes say to create it first.
    assert "PersistentVolumeClaim, cpu-ddp-checkpoints" in notes and "create that claim in\n   default first" in notes
    assert "Monitoring" not in notes
    out = helm(cluster, "install", "--dry-run=client", "dt", CHART, "-n", "ops", "--set", "watchNamespaces={ml}",
               "--set", "prometheusRule.enabled=true")
    notes = out[out.index("NOTES:"):]
    assert "watches ml (namespaced mode)" in notes and "kubectl -n ml get dt -w" in notes
    assert "PrometheusRule dt-operator" in notes


def test_chart_renders_objects_the_api_server_accepts(cluster, namespace):
    cluster.kubectl("apply", "--server-side", "-f", os.path.join(CHART, "crds"))
    cluster.wait_established("distributedtrainings.disttrain.dev")
    cluster.wait_established("clustertrainingtemplates.disttrain.dev")
    rendered = helm(cluster, "template", "disttrain", CHART, "-n", namespace,
                    "--set", "replicaCount=2", "--set", "dashboards.enabled=true", "--set", "templates.examples=true")
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRole", "ClusterRoleBinding",
        *["ClusterTrainingTemplate"] * 3, "ConfigMap", "ConfigMap", "Deployment", "NetworkPolicy", "Role",
        "RoleBinding", "Service", "ServiceAccount"]
    # templates.examples: the chart's example templates, as its examples/templates/ files hold them.
    shipped = sorted((yaml.safe_load(open(os.path.join(CHART, "examples", "templates", name)))
                      for name in os.listdir(os.path.join(CHART, "examples", "templates"))),
                     key=lambda d: d["metadata"]["name"])
    assert sorted((d for d in docs if d["kind"] == "ClusterTrainingTemplate"), key=lambda d: d["metadata"]["name"]) \
        == shipped and [d["metadata"]["name"] for d in shipped] == ["cpu", "gpu-1", "gpu-8x"]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    # Only the monitoring namespace may scrape the operator's metrics (they name every
    # tenant's jobs); the health port stays open. (Enforcement needs a CNI that implements
    # NetworkPolicy, which neither KWOK nor the real node's bridge is: the objects are checked.)
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert policy["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 8081}]},
        {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}],
         "ports": [{"protocol": "TCP", "port": 8080}]}]
    assert deployment["spec"]["replicas"] == 2
    assert "--leader-elect" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    lease_role = next(d for d in docs if d["kind"] == "Role")
    assert lease_role["metadata"]["namespace"] == namespace
    assert lease_role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                                    "verbs": ["get", "create", "update"]}]
    cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=rendered)


def test_chart_roles_are_the_ones_the_tests_run_the_operator_and_scrape_it_with(cluster):
    rendered = [d for d in yaml.safe_load_all(helm(cluster, "template", "disttrain", CHART)) if d]
    roles = {d["metadata"]["name"]: d["rules"] for d in rendered if d["kind"] == "ClusterRole"}
    for name, path in (("disttrain-operator", "cluster-role.yaml"),
                       ("disttrain-operator-metrics-reader", "metrics-reader.yaml")):
        with open(os.path.join(REPO, "manifests", "rbac", path)) as handle:
            assert roles[name] == yaml.safe_load(handle)["rules"], path
    # No reader named, none bound: the chart lends /metrics to nobody by default.
    assert not [d for d in rendered if d["kind"] == "ClusterRoleBinding" and "metrics" in d["metadata"]["name"]]
    # Templates: nobody is bound to writing them; reading, the groups templates.readerGroups names.
    assert roles["disttrain-template-reader"] == [{"apiGroups": ["disttrain.dev"], "resources": [
        "trainingtemplates", "clustertrainingtemplates"], "verbs": ["get", "list", "watch"]}]
    assert set(roles["disttrain-template-admin"][0]["verbs"]) >= {"create", "update", "patch", "delete"}
    assert not [d for d in rendered if d["kind"] == "ClusterRoleBinding" and "template" in d["metadata"]["name"]]
    read = [d for d in yaml.safe_load_all(helm(cluster, "template", "disttrain", CHART, "--set",
                                               "templates.readerGroups={ml-users,ml-admins}")) if d]
    binding = next(d for d in read if d["kind"] == "ClusterRoleBinding" and "template" in d["metadata"]["name"])
    assert binding["roleRef"]["name"] == "disttrain-template-reader" and binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group} for group in ("ml-users", "ml-admins")]


def test_alert_rules_pass_promtool_and_use_our_metrics(cluster, tmp_path):
    rendered = [d for d in yaml.safe_load_all(helm(cluster, "template", "disttrain", CHART, *ALL_ON)) if d]
    rule = next(d for d in rendered if d["kind"] == "PrometheusRule")
    groups = tmp_path / "rules.yaml"
    groups.write_text(yaml.safe_dump(rule["spec"]))
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: hack/ensure-promtool.sh installs it (make tools)"
    check = subprocess.run([promtool, "check", "rules", str(groups)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    alerts = {r["alert"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"DistTrainJobFailed", "DistTrainJobStalled", "DistTrainCheckpointTooOld"} <= set(alerts)
    for expr in alerts.values():
        assert metric_names(expr) <= METRICS, expr


def test_the_monitors_scrape_every_worker_the_operator_creates_and_the_operator_itself(cluster, tmp_path):
    """What Prometheus Operator would do with the chart's PodMonitor and ServiceMonitor: the
    PodMonitor selects every worker pod the operator renders (any namespace) on a port the
    pod names; the ServiceMonitor selects the chart's Service, and no job's Service, on a port
    that leads to the port the operator serves /metrics on."""
    objects = [d for d in yaml.safe_load_all(helm(cluster, "template", "dt", CHART, "-n", "ops", *ALL_ON)) if d]
    pod_monitor = next(d for d in objects if d["kind"] == "PodMonitor")["spec"]
    service_monitor = next(d for d in objects if d["kind"] == "ServiceMonitor")["spec"]
    workers, job_services = [], []
    for example in ("cpu-ddp-2x1.yaml", "elastic-2-4.yaml", "mesh-fsdp-tp.yaml"):
        out = subprocess.run([sys.executable, "-m", "disttrain.cli", "render", "-n", "ml",
                              os.path.join(REPO, "manifests", "examples", example)],
                             capture_output=True, text=True, check=True).stdout
        rendered = [d for d in yaml.safe_load_all(out) if d]
        workers += [d for d in rendered if d["kind"] == "Pod"]
        job_services += [d for d in rendered if d["kind"] == "Service"]
    assert len(workers) >= 6 and job_services

    def selects(selector: dict, labels: dict) -> bool:
        return selector["matchLabels"].items() <= labels.items() and not selector.get("matchExpressions")

    assert pod_monitor["namespaceSelector"] == {"any": True}
    for pod in workers:
        ports = {p.get("name") for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        assert selects(pod_monitor["selector"], pod["metadata"]["labels"]), pod["metadata"]["name"]
        assert {e["port"] for e in pod_monitor["podMetricsEndpoints"]} <= ports, pod["metadata"]["name"]
    selected = [d for d in objects if d["kind"] == "Service" and selects(service_monitor["selector"], d["metadata"]["labels"])]
    assert len(selected) == 1, "the ServiceMonitor selects the chart's one metrics Service"
    assert not [s for s in job_services if selects(service_monitor["selector"], s["metadata"].get("labels", {}))]
    service = selected[0]
    deployment = operator_deployment(objects)
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    port = next(p for p in service["spec"]["ports"] if p["name"] == service_monitor["endpoints"][0]["port"])
    named = {p["name"]: p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]}
    assert named[port["targetPort"]] == operator_reading(deployment)[1].metrics_port


def test_alerts_fire_on_failure_stall_and_old_checkpoint(cluster, tmp_path):
    """promtool's rule unit tests: the alerts fire on synthetic series, and only then."""
    rendered = [d for d in yaml.safe_load_all(helm(cluster, "template", "disttrain", CHART, *ALL_ON)) if d]
    rule = next(d for d in rendered if d["kind"] == "PrometheusRule")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]))
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [
            {"series": 'disttrain_operator_job_failures_total{reason="BackoffLimitExceeded"}', "values": "0 0 1 1 1"},
            {"series": 'disttrain_train_step{namespace="ml",job="stuck",pod="stuck-worker-0"}', "values": "5x40"},
            {"series": 'disttrain_train_step{namespace="ml",job="busy",pod="busy-worker-0"}', "values": "0+1x40"},
            {"series": 'disttrain_operator_checkpoint_age_seconds{namespace="ml",job="old"}', "values": "4000x20"},
            # 59 minutes old: under the default 60 (checkpointMaxAgeMinutes), so it must not fire.
            {"series": 'disttrain_operator_checkpoint_age_seconds{namespace="ml",job="recent"}', "values": "3540x20"},
        ],
        "alert_rule_test": [
            {"eval_time": "4m", "alertname": "DistTrainJobFailed", "exp_alerts": [
                {"exp_labels": {"severity": "warning", "reason": "BackoffLimitExceeded"},
                 "exp_annotations": {"summary": "A DistributedTraining failed (BackoffLimitExceeded)",
                                     "description": "kubectl get dt -A shows which; kubectl describe dt NAME has the message."}}]},
            {"eval_time": "30m", "alertname": "DistTrainJobStalled", "exp_alerts": [
                {"exp_labels": {"severity": "warning", "namespace": "ml", "job": "stuck"},
                 "exp_annotations": {"summary": "ml/stuck made no step in 15 minutes",
                                     "description": "The trainer runs but its step does not move: a hung collective, a stuck data loader or a dead node. Check kubectl logs of its workers."}}]},
            {"eval_time": "10m", "alertname": "DistTrainCheckpointTooOld", "exp_alerts": [
                {"exp_labels": {"severity": "warning", "namespace": "ml", "job": "old"},
                 "exp_annotations": {"summary": "ml/old: newest checkpoint older than 60 minutes",
                                     "description": "A failure now would lose that much training. Check the checkpoint volume and the CheckpointStale condition."}}]},
        ],
    }]}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run([shutil.which("promtool") or "promtool", "test", "rules", "tests.yaml"], cwd=tmp_path,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_kueue_switch_grants_the_kueue_rules_and_turns_the_operator_to_kueue(cluster):
    def env_of(objects: dict) -> dict:
        deployment = next(d for (kind, _), d in objects.items() if kind == "Deployment")
        return {e["name"]: e.get("value") for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}

    plain = rendered(cluster)
    assert env_of(plain)["DISTTRAIN_KUEUE"] == "false"
    assert not [name for kind, name in plain if kind == "ClusterRole" and name.endswith("-kueue")]
    on = rendered(cluster, "--set", "kueue.enabled=true")
    assert env_of(on)["DISTTRAIN_KUEUE"] == "true"
    role = next(d for (kind, name), d in on.items() if kind == "ClusterRole" and name.endswith("-kueue"))
    with open(os.path.join(REPO, "manifests", "kueue", "rbac.yaml")) as handle:
        assert role["rules"] == next(yaml.safe_load_all(handle))["rules"]
    binding = next(d for (kind, name), d in on.items() if kind == "ClusterRoleBinding" and name.endswith("-kueue"))
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    err = helm_fails(cluster, "template", "x", CHART, "--set", "kueue.enabled=true", "--set", "watchNamespaces={a}")
    assert "kueue.enabled needs the cluster-wide install" in err, err
