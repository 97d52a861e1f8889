"""The install of a user whose cluster has none of our images: `make push` to their
registry, then the `helm upgrade --install` it prints (README, "Run it on your cluster"); and
a maintainer's `make release`, whose packaged chart installs from the same registry.

The registry is the CNCF distribution registry (hack/tools/registry) on loopback, over
plain HTTP; the real node's containerd reaches it through a hosts.toml under the node's
`config_path`, as a node of any cluster reaches a private registry. The names the chart
is given are the registry's, never loaded into the node by hand: the kubelet pulls each.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from .conftest import (OPERATOR_NS, REPO, Registry, example_job, helm, job_story, operator_log, phase, pulled,
                       tools_bin, wait_job, wait_operator_ready, worker_pods)

pytestmark = [pytest.mark.slow]

VERSION = next(line.split('"')[1] for line in (REPO / "pyproject.toml").read_text().splitlines()
               if line.startswith("version = "))


def check_sample(first_line: str, output: str, *replace: tuple[str, str]) -> None:
    """docs/operations.md's sample session of `first_line` is this output, line for line, once
    this test's registry and folder are written as the doc writes them (`replace`)."""
    import doc_blocks  # tests/ is on the path, as for the docs test

    for ours, theirs in replace:
        output = output.replace(ours, theirs)
    text = (REPO / "docs" / "operations.md").read_text()
    samples = [block.text.strip().splitlines() for block in doc_blocks.parse_blocks("docs/operations.md", text)
               if doc_blocks.is_sample(block)]
    [shown] = [lines[1:] for lines in samples if lines[0] == first_line] or [None]
    assert shown is not None, f"docs/operations.md shows no sample session of {first_line!r}"
    wrong = doc_blocks.output_matches(shown, output)
    assert not wrong, f"docs/operations.md shows {wrong!r} where make printed:\n{output}"


def test_make_push_then_the_printed_helm_install_runs_jobs_from_the_registry_and_so_does_the_release(
        node_cluster, ns, tmp_path):
    registry = Registry(tmp_path / "registry")
    repo = f"{registry.host}/disttrain"
    operator_image, trainer_image = f"{repo}/operator:{VERSION}", f"{repo}/trainer:{VERSION}"
    hosts = Path(node_cluster.state_dir) / "node" / "certs.d" / registry.host
    hosts.mkdir(parents=True)
    (hosts / "hosts.toml").write_text(f'server = "http://{registry.host}"\n\n'
                                      f'[host."http://{registry.host}"]\n  capabilities = ["pull", "resolve"]\n')
    installed = False
    try:
        # As a user's shell runs it: under `make test` the nested make would wrap its output
        # in make[1]: Entering/Leaving directory lines.
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
        push = subprocess.run(["make", "push", f"REGISTRY={repo}", "PUSH_TLS_VERIFY=false"], cwd=REPO,
                              capture_output=True, text=True, timeout=3600, env=env)
        assert push.returncode == 0, push.stderr[-4000:] + push.stdout[-2000:]
        install = push.stdout.strip().splitlines()[-1]
        assert install == (f"helm upgrade --install disttrain charts/disttrain -n {OPERATOR_NS} --create-namespace "
                           f"--set image.repository={repo}/operator --set trainerImage.repository={repo}/trainer")
        check_sample("$ make push REGISTRY=registry.example.com/ml", push.stdout, (repo, "registry.example.com/ml"))
        assert registry.get("/v2/_catalog") == {"repositories": ["disttrain/operator", "disttrain/trainer"]}
        assert registry.get("/v2/disttrain/trainer/tags/list")["tags"] == [VERSION]

        # The printed command, as printed: our pinned helm, run from the checkout.
        args = [str(REPO / a) if a == "charts/disttrain" else a for a in shlex.split(install)[1:]]
        assert args[:2] == ["upgrade", "--install"]
        helm(node_cluster, *args)
        installed = True
        pod = wait_operator_ready(node_cluster, timeout=900)
        assert pod["status"]["containerStatuses"][0]["image"] == operator_image, operator_log(node_cluster)
        assert pulled(node_cluster, OPERATOR_NS, pod["metadata"]["name"], operator_image)

        # A job that names no image runs the registry's trainer, and its status says which.
        job = example_job(nodes=1, trainer={"builtin": {"model": "mlp", "steps": 6, "batchSize": 8}})
        job["spec"]["checkpoint"] = {"storage": "none"}
        assert "image" not in job["spec"]
        job["metadata"]["namespace"] = ns
        node_cluster.apply(job)
        name = job["metadata"]["name"]
        done = wait_job(node_cluster, ns, name, "Succeeded, from the registry's trainer image",
                        lambda j: phase(j) in ("Succeeded", "Failed"))
        assert phase(done) == "Succeeded", job_story(node_cluster, ns, name)
        assert done["status"]["resolved"]["image"] == trainer_image
        assert "image" not in node_cluster.get("dt", name, ns)["spec"]  # nothing written into the spec
        [worker] = worker_pods(node_cluster, ns, name)
        assert worker["spec"]["containers"][0]["image"] == trainer_image
        assert pulled(node_cluster, ns, worker["metadata"]["name"], trainer_image), job_story(node_cluster, ns, name)

        # The maintainer's release: the same images pushed, their digests recorded, and a
        # chart whose own defaults are the registry's, installed with the printed command.
        dist = tmp_path / "dist"
        release = subprocess.run(["make", "release", f"REGISTRY={repo}", f"DIST={dist}", "PUSH_TLS_VERIFY=false"],
                                 cwd=REPO, capture_output=True, text=True, timeout=3600, env=env)
        assert release.returncode == 0, release.stderr[-4000:] + release.stdout[-2000:]
        chart, wheel = dist / f"disttrain-{VERSION}.tgz", dist / f"disttrain-{VERSION}-py3-none-any.whl"
        assert sorted(p.name for p in dist.iterdir()) == sorted(
            [chart.name, wheel.name, "images.txt", "SHA256SUMS"]), release.stdout
        assert (dist / "images.txt").read_text().splitlines() == [
            f"{repo}/{target}:{VERSION}@{registry.digest(f'disttrain/{target}', VERSION)}"
            for target in ("operator", "trainer")]
        sums = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True, text=True)
        assert sums.returncode == 0 and sums.stdout.count(": OK") == 3, sums.stdout + sums.stderr
        printed = release.stdout.strip().splitlines()
        assert printed[-2:] == [
            f"helm install disttrain {dist}/disttrain-{VERSION}.tgz -n {OPERATOR_NS} --create-namespace",
            f"pip install '{dist}/{wheel.name}[cli]'"], release.stdout
        check_sample("$ make release REGISTRY=registry.example.com/ml", release.stdout,
                     (str(dist), "dist"), (repo, "registry.example.com/ml"))
        # A fresh install of the packaged chart, as printed: no --set, the registry's images.
        helm(node_cluster, "uninstall", "disttrain", "-n", OPERATOR_NS, "--wait", "--timeout=120s")
        installed = False
        helm(node_cluster, *shlex.split(printed[-2])[1:])
        installed = True
        [deployment] = json.loads(node_cluster.kubectl("get", "deployments", "-n", OPERATOR_NS, "-o", "json").stdout)["items"]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert container["image"] == operator_image
        assert {e["name"]: e.get("value") for e in container["env"]}["DISTTRAIN_TRAINER_IMAGE"] == trainer_image
        assert deployment["metadata"]["labels"]["helm.sh/chart"] == f"disttrain-{VERSION}"
        # No values given: the images are the packaged chart's own defaults.
        assert json.loads(helm(node_cluster, "get", "values", "disttrain", "-n", OPERATOR_NS, "-o", "json")) in (None, {})
        pod = wait_operator_ready(node_cluster, timeout=300)
        assert pod["status"]["containerStatuses"][0]["image"] == operator_image
    finally:
        if installed:
            helm(node_cluster, "uninstall", "disttrain", "-n", OPERATOR_NS, "--wait", "--timeout=120s")
            node_cluster.kubectl("delete", "namespace", OPERATOR_NS, "--timeout=120s", check=False, timeout=150)
        node_cluster.kubectl("delete", "dt", "--all", "-n", ns, "--wait=true", "--timeout=120s", check=False,
                             timeout=150)
        registry.stop()
        shutil.rmtree(hosts.parent)
        # The node's containerd keeps its images across clusters: forget every name pulled
        # from this registry, by tag and by digest (its garbage collector then drops what
        # only they held). PULL_BACK in conftest.py says why this module runs last.
        ctr = [str(tools_bin() / "ctr"), "--address", str(Path(node_cluster.state_dir) / "node" / "containerd.sock"),
               "-n", "k8s.io", "images"]
        names = subprocess.run([*ctr, "ls", "-q"], capture_output=True, text=True, timeout=120).stdout.split()
        ours = [n for n in names if n.startswith(registry.host + "/")]
        if ours:
            subprocess.run([*ctr, "rm", *ours], capture_output=True, timeout=120)
