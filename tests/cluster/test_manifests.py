"""manifests/ as users apply it: every file and every kustomization passes kubeconform
strict against the API server's own schemas, and `kubectl apply -k manifests/` works in one
shot on a fresh cluster (no "no matches for kind", no second run)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess

import pytest
import yaml

from api_schemas import REPO, kubeconform, problems

pytestmark = pytest.mark.cluster

MANIFESTS = REPO / "manifests"
# Applied in one shot on a fresh cluster; manifests/ha/ goes on top of manifests/.
ONE_SHOT = ["manifests", "manifests/namespaced"]
KUSTOMIZATIONS = [*ONE_SHOT, "manifests/ha"]
# Sweep files (manifests/examples/sweeps/) are disttrain's own format, not Kubernetes
# objects: `disttrain sweep` reads them, and tests/unit/test_sweep_spec.py validates them.
SWEEPS = MANIFESTS / "examples" / "sweeps"
FILES = sorted(p for p in glob.glob(str(MANIFESTS / "**" / "*.yaml"), recursive=True)
               if os.path.basename(p) != "kustomization.yaml" and not p.startswith(str(SWEEPS) + os.sep))


def build(cluster, path: str) -> list[dict]:
    out = cluster.kubectl("kustomize", str(REPO / path)).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_every_manifest_file_and_kustomization_passes_kubeconform_strict(cluster, tmp_path):
    """One kubeconform run (it compiles the schemas once): every file, every kustomize build."""
    builds = {}
    for path in KUSTOMIZATIONS:
        builds[tmp_path / f"{path.replace('/', '_')}.yaml"] = docs = build(cluster, path)
        list(builds)[-1].write_text(yaml.safe_dump_all(docs))
    results = kubeconform(cluster, *FILES, *map(str, builds))
    assert {r["filename"] for r in results} == set(FILES) | set(map(str, builds))
    for path, docs in builds.items():
        assert sum(r["filename"] == str(path) for r in results) == len(docs), path
    assert not problems(results), "\n".join(problems(results))


@pytest.mark.parametrize("path", ONE_SHOT)
def test_one_shot_kustomizations_hold_no_object_of_a_kind_they_define(cluster, path):
    """kubectl maps every object to a served resource before it applies any: an object whose
    kind a CRD in the same apply defines fails until a second run."""
    docs = build(cluster, path)
    defined = {(d["spec"]["group"], d["spec"]["names"]["kind"]) for d in docs
               if d["kind"] == "CustomResourceDefinition"}
    used = {(d["apiVersion"].split("/")[0], d["kind"]) for d in docs}
    assert not used & defined, used & defined


@pytest.fixture(scope="module")
def fresh_cluster(request, cluster):
    """A second control plane with nothing installed. It asks for `cluster` first so the
    session cluster's KUBECONFIG is the one restored after this module."""
    from e2e.conftest import start_cluster  # tests/conftest.py's, loaded by path there

    env = {"DISTTRAIN_FAKE_GPU_NODES": "0", "DISTTRAIN_FAKE_CPU_NODES": "0"}
    yield from start_cluster(request, f"fresh-{os.getpid()}", env)


def crds_besides_kwoks(cluster):
    """The CRDs a cluster serves, less the fake nodes' own (KWOK's Logs and ClusterLogs,
    which hack/cluster.sh installs so fake pods have logs)."""
    names = cluster.kubectl("get", "crd", "-o", "name").stdout.split()
    return [name for name in names if not name.endswith(".kwok.x-k8s.io")]


def test_apply_k_manifests_in_one_shot_on_a_fresh_cluster_then_ha_on_top(fresh_cluster):
    assert crds_besides_kwoks(fresh_cluster) == []
    proc = fresh_cluster.kubectl("apply", "-k", str(MANIFESTS), check=False)
    assert proc.returncode == 0, proc.stderr
    assert "error" not in proc.stderr.lower(), proc.stderr
    deployment = fresh_cluster.get("deployment", "disttrain-operator", "disttrain-system")
    # One replica that elects itself on a Lease: a rollout never has two at work.
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == ["--all-namespaces", "--leader-elect"]
    assert deployment["spec"]["replicas"] == 1
    for kind, name in [("crd", "distributedtrainings.disttrain.dev"),
                       ("clusterrole", "disttrain-operator"), ("clusterrolebinding", "disttrain-operator")]:
        assert fresh_cluster.try_get(kind, name), (kind, name)
    assert fresh_cluster.try_get("serviceaccount", "disttrain-operator", "disttrain-system")
    assert fresh_cluster.try_get("service", "disttrain-operator-metrics", "disttrain-system")
    role = fresh_cluster.get("role", "disttrain-operator-leader-election", "disttrain-system")
    assert role["rules"] == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                              "verbs": ["get", "create", "update"]}]
    assert fresh_cluster.try_get("rolebinding", "disttrain-operator-leader-election", "disttrain-system")
    assert crds_besides_kwoks(fresh_cluster) == [f"customresourcedefinition.apiextensions.k8s.io/{plural}.disttrain.dev"
                                                 for plural in ("clustertrainingtemplates", "distributedtrainings",
                                                                "trainingtemplates")]

    proc = fresh_cluster.kubectl("apply", "-k", str(MANIFESTS / "ha"), check=False)
    assert proc.returncode == 0, proc.stderr
    deployment = fresh_cluster.get("deployment", "disttrain-operator", "disttrain-system")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["template"]["spec"]["containers"][0]["args"] == ["--all-namespaces", "--leader-elect"]

    proc = fresh_cluster.kubectl("apply", "-k", str(MANIFESTS / "namespaced"), check=False)
    assert proc.returncode == 0, proc.stderr
    assert fresh_cluster.try_get("role", "disttrain-operator", "disttrain-jobs")
    assert fresh_cluster.try_get("role", "disttrain-operator-leader-election", "disttrain-system")


def test_the_old_layout_would_fail_on_a_fresh_cluster(cluster, tmp_path):
    """The failure the one-shot layout avoids, shown with kubectl itself: a CRD and an
    object of its kind in one apply are refused when the kind is not served yet."""
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "oneshotprobes.example.dev"},
           "spec": {"group": "example.dev", "scope": "Cluster",
                    "names": {"kind": "OneShotProbe", "plural": "oneshotprobes", "singular": "oneshotprobe"},
                    "versions": [{"name": "v1", "served": True, "storage": True,
                                  "schema": {"openAPIV3Schema": {"type": "object"}}}]}}
    probe = {"apiVersion": "example.dev/v1", "kind": "OneShotProbe", "metadata": {"name": "probe"}}
    (tmp_path / "both.yaml").write_text(yaml.safe_dump_all([crd, probe]))
    try:
        proc = subprocess.run(["kubectl", "apply", "-f", str(tmp_path / "both.yaml")], env=cluster.env,
                              capture_output=True, text=True)
        assert proc.returncode != 0 and 'no matches for kind "OneShotProbe"' in proc.stderr, proc.stderr
    finally:
        cluster.kubectl("delete", "crd", "oneshotprobes.example.dev", "--ignore-not-found", check=False)


@pytest.mark.parametrize("images", ["local", "registry"])
def test_kind_up_makes_two_nodes_sharing_the_example_claim_and_installs_the_loaded_operator(cluster, images):
    """What `make kind-up` would create, from `hack/kind.sh print` (tests/e2e/test_kind.py runs
    the local path for real; the registry path needs a registry): two nodes that both run pods
    and both mount the one host directory the example's claim is bound to, the node image built
    here only on the local path (kind's own, with its kindnet, otherwise), and the chart told to
    use the operator image it loaded, never to pull it."""
    proc = subprocess.run([shutil.which("bash"), str(REPO / "hack" / "kind.sh"), "print"],
                          env={**cluster.env, "DISTTRAIN_KIND_IMAGES": images}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    config_text, rest = proc.stdout.split("# values.yaml\n")
    values_text, objects_text = rest.split("# objects\n")
    config = yaml.safe_load(config_text)
    assert [n["role"] for n in config["nodes"]] == ["control-plane", "worker"]
    mounts = [n["extraMounts"] for n in config["nodes"]]
    assert mounts[0] == mounts[1] and [m["containerPath"] for m in mounts[0]] == ["/var/local/disttrain"]
    node_images = {n.get("image") for n in config["nodes"]}
    if images == "local":
        assert len(node_images) == 1 and next(iter(node_images)).startswith("localhost/disttrain/kind-node:v1.37.1-")
        assert config["networking"]["disableDefaultCNI"] is True
    else:
        assert node_images == {None} and config["networking"]["disableDefaultCNI"] is False
    values = yaml.safe_load(values_text)
    names = subprocess.run(["bash", str(REPO / "hack" / "images.sh"), "names"], capture_output=True,
                           text=True, check=True).stdout.split()
    assert f"{values['image']['repository']}:{values['image']['tag']}" in names
    assert values["image"]["pullPolicy"] == "Never"
    objects = [d for d in yaml.safe_load_all(objects_text) if d]
    claim = next(d for d in objects if d["kind"] == "PersistentVolumeClaim")
    volume = next(d for d in objects if d["kind"] == "PersistentVolume")
    example = next(d for d in yaml.safe_load_all((MANIFESTS / "examples" / "cpu-ddp-2x1.yaml").read_text()) if d)
    assert claim["metadata"]["name"] == example["spec"]["checkpoint"]["claimName"]
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    assert volume["spec"]["hostPath"]["path"].startswith(mounts[0][0]["containerPath"] + "/")


def test_kind_up_without_kind_says_what_is_missing_and_how_to_get_it(cluster, tmp_path):
    """`make kind-up` on a machine without the tools fails before it changes anything."""
    (tmp_path / "dirname").symlink_to(shutil.which("dirname"))  # what the script runs before its checks
    proc = subprocess.run([shutil.which("bash"), str(REPO / "hack" / "kind.sh"), "up"],
                          env={**cluster.env, "PATH": str(tmp_path)}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "[kind disttrain] ERROR: kind not found on PATH (bash hack/build-tools.sh builds all three; "
        "add its --print-bin to PATH)"), proc.stderr
